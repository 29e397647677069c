//go:build linux

package gitproxy

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"

	"coily.dev/coily/internal/canary"
	"coily.dev/coily/internal/standin"
	"coily.dev/coily/keystore"
	"coily.dev/coily/policy"
)

// sshUp is an ssh upstream: a real sshd on 127.0.0.1 serving a bare
// repository through the login shell of the test's user, which accepts
// one key; the proxy's keystore holds that key.
type sshUp struct {
	user     string
	port     int
	repo     string // the bare repository's absolute path, without ".git"
	key      string // the private key, as the keystore holds it
	hostPub  string // sshd's host key, as known_hosts writes a key
	otherPub string // a host key sshd does not have
}

func newSSHUp(t *testing.T) *sshUp {
	t.Helper()
	u := &sshUp{user: standin.NeedSSH(t)}
	srv, err := os.MkdirTemp("", "coily-gitssh-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(srv) })
	keys := filepath.Join(srv, "keys")
	if err := os.Mkdir(keys, 0o700); err != nil {
		t.Fatal(err)
	}
	standin.SSHKeygen(t, filepath.Join(keys, "client"))
	standin.SSHKeygen(t, filepath.Join(srv, "host_key"))
	standin.SSHKeygen(t, filepath.Join(keys, "other"))
	read := func(p string) string {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(b))
	}
	u.key, u.hostPub, u.otherPub = read(filepath.Join(keys, "client")), read(filepath.Join(srv, "host_key.pub")), read(filepath.Join(keys, "other.pub"))
	if err := os.WriteFile(filepath.Join(srv, "authorized_keys"), []byte(read(filepath.Join(keys, "client.pub"))+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	u.repo = filepath.Join(srv, "repo")
	if out, err := gitCmd(srv, "init", "--quiet", "--bare", "--initial-branch=main", u.repo+".git").CombinedOutput(); err != nil {
		t.Fatalf("git init: %v: %s", err, out)
	}
	u.port = standin.SSHD(t, srv)
	return u
}

// remote is the policy's entry for the upstream, pinning pin (a public
// key line) for it.
func (u *sshUp) remote(pin string) string {
	return fmt.Sprintf(`    - name: box
      url: ssh://%s@localhost:%d%s
      roles: [agent]
      ssh_key: file:deploy-key
      known_hosts: ["[localhost]:%d %s"]
      allow_cidrs: [127.0.0.0/8, "::1/128"]
      push:
        refs: ["refs/heads/agent/*"]
        create: allow
        fast_forward: allow
        force: deny
`, u.user, u.port, u.repo, u.port, pin)
}

// keyStore holds the upstream's ssh key under every name.
type keyStore struct{ key string }

func (k keyStore) Fetch(_ context.Context, refs map[string]keystore.Ref) (*keystore.Set, error) {
	out := &keystore.Set{Values: map[string]string{}}
	for name := range refs {
		out.Values[name] = k.key
	}
	return out, nil
}

// ref is the upstream repository's ref, read in its directory.
func (u *sshUp) ref(t *testing.T, ref string) string {
	t.Helper()
	out, _ := gitCmd(u.repo+".git", "rev-parse", "--verify", "--quiet", ref).Output()
	return strings.TrimSpace(string(out))
}

// Clone, fetch and push through the proxy to a real sshd: the key is
// offered by an agent of each run and never written; a new branch and a
// fast-forward reach upstream, a forced update is refused, and nothing
// of the key is left in the proxy's directories, in git's output or in
// any argv.
func TestSSHUpstream(t *testing.T) {
	u := newSSHUp(t)
	e := newEnv(t, u.remote(pinOf(u.hostPub)),
		func(c *Config) { c.Keystore = keyStore{key: u.key} })
	secrets := canary.New(t)
	secrets.AddString("ssh key", u.key)
	argv := secrets.WatchArgv()
	before, _ := filepath.Glob(filepath.Join(os.TempDir(), "coily-git-ssh-*"))

	seed := filepath.Join(t.TempDir(), "seed")
	e.git("", "init", "--quiet", "--initial-branch=main", seed)
	first := e.commit(seed, "README", "first")
	e.git(seed, "push", "--quiet", u.repo+".git", "main")

	url := e.srv.URL + fmt.Sprintf("/git/localhost:%d%s.git", u.port, u.repo)
	work := filepath.Join(t.TempDir(), "work")
	var outs []string
	outs = append(outs, e.git("", "clone", "--quiet", url, work))
	if got := strings.TrimSpace(e.git(work, "rev-parse", "HEAD")); got != first {
		t.Fatalf("clone at %s, want %s", got, first)
	}
	e.git(work, "checkout", "--quiet", "-b", "agent/x")
	c1 := e.commit(work, "a", "one")
	outs = append(outs, e.git(work, "push", "origin", "agent/x"))
	if got := u.ref(t, "refs/heads/agent/x"); got != c1 {
		t.Fatalf("new branch upstream at %q, want %s", got, c1)
	}
	c2 := e.commit(work, "b", "two")
	outs = append(outs, e.git(work, "push", "origin", "agent/x"))
	if got := u.ref(t, "refs/heads/agent/x"); got != c2 {
		t.Fatalf("fast-forward upstream at %q, want %s", got, c2)
	}
	if r := e.lastPush(); r.Decision != "allow" || !strings.HasPrefix(r.Details["url"], "ssh://") {
		t.Errorf("push record: %+v", r)
	}
	outs = append(outs, e.git(work, "fetch", "origin"))

	e.git(work, "commit", "--quiet", "--amend", "-m", "two, amended")
	out, err := e.try(work, "push", "--force", "origin", "agent/x")
	if err == nil || !strings.Contains(out, "does not allow a force of refs/heads/agent/x") {
		t.Fatalf("forced update: err=%v\n%s", err, out)
	}
	if got := u.ref(t, "refs/heads/agent/x"); got != c2 {
		t.Fatalf("forced update reached upstream: %s", got)
	}
	argv.Stop()
	secrets.CheckText("the agent's git", append(outs, out)...)
	secrets.CheckFiles(e.proxy.cfg.Dir)
	after, _ := filepath.Glob(filepath.Join(os.TempDir(), "coily-git-ssh-*"))
	if len(after) > len(before) {
		t.Errorf("agent directories left behind: %q (before: %q)", after, before)
	}
}

// A host whose key the remote does not pin is refused, naming the key it
// showed, and nothing is signed for it.
func TestSSHUpstreamWrongHostKey(t *testing.T) {
	u := newSSHUp(t)
	e := newEnv(t, u.remote(pinOf(u.otherPub)), func(c *Config) { c.Keystore = keyStore{key: u.key} })
	url := e.srv.URL + fmt.Sprintf("/git/localhost:%d%s.git", u.port, u.repo)
	out, err := e.try("", "ls-remote", url)
	want := fmt.Sprintf("policy-deny: upstream [localhost]:%d showed host key %s, which git remote \"box\" does not pin", u.port, fingerprint(t, u.hostPub))
	if err == nil || !strings.Contains(out, want) {
		t.Fatalf("ls-remote with a host key not pinned: err=%v\n%s\nwant %s", err, out, want)
	}
	if f := e.rec.events("git.fetch"); len(f) != 1 || f[0].Code != "policy-deny" {
		t.Errorf("fetch records: %+v", f)
	}
}

// An upstream that writes what ssh writes of a host key it refuses, once
// logged in, is not taken for a host key refusal: what follows the host
// key check is upstream's to say.
func TestSSHUpstreamSpoofedRefusal(t *testing.T) {
	u := newSSHUp(t)
	auth := filepath.Join(filepath.Dir(u.repo), "authorized_keys")
	pub, err := os.ReadFile(auth)
	if err != nil {
		t.Fatal(err)
	}
	forced := `command="echo 'The fingerprint for the ED25519 key sent by the remote host is' >&2; echo 'SHA256:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA.' >&2; echo 'Host key verification failed.' >&2; exit 1" `
	if err := os.WriteFile(auth, append([]byte(forced), pub...), 0o644); err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, u.remote(pinOf(u.hostPub)), func(c *Config) { c.Keystore = keyStore{key: u.key} })
	out, err := e.try("", "ls-remote", e.srv.URL+fmt.Sprintf("/git/localhost:%d%s.git", u.port, u.repo))
	if err == nil || strings.Contains(out, "showed host key") || !strings.Contains(out, "internal: fetching from upstream") {
		t.Fatalf("err=%v\n%s", err, out)
	}
}

// pinOf is a public key line's type and key: what a known_hosts line
// pins after its hosts.
func pinOf(pub string) string {
	f := strings.Fields(pub)
	return f[0] + " " + f[1]
}

func fingerprint(t *testing.T, pub string) string {
	t.Helper()
	k, _, _, _, err := ssh.ParseAuthorizedKey([]byte(pub))
	if err != nil {
		t.Fatal(err)
	}
	return ssh.FingerprintSHA256(k)
}

// What else an ssh upstream refuses before any byte of git passes: a
// host that shows no key of a pinned type, an address the remote's
// allow_cidrs does not name (the same guard as https), a key that is no
// usable private key (never quoted).
func TestSSHUpstreamRefusals(t *testing.T) {
	u := newSSHUp(t)
	ecdsa := filepath.Join(t.TempDir(), "ecdsa")
	if out, err := exec.Command("ssh-keygen", "-q", "-t", "ecdsa", "-N", "", "-C", "", "-f", ecdsa).CombinedOutput(); err != nil {
		t.Fatalf("ssh-keygen: %v: %s", err, out)
	}
	ecdsaPub, err := os.ReadFile(ecdsa + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, remote, key, want string
	}{
		{"no key of a pinned type", u.remote(pinOf(string(ecdsaPub))), u.key,
			fmt.Sprintf(`policy-deny: upstream [localhost]:%d showed no host key git remote "box" pins`, u.port)},
		{"loopback not allowed", strings.Replace(u.remote(pinOf(u.hostPub)), `      allow_cidrs: [127.0.0.0/8, "::1/128"]`+"\n", "", 1), u.key,
			`policy-deny: upstream localhost resolves to 127.0.0.1 (loopback), which git remote "box"'s allow_cidrs does not name`},
		{"not a key", u.remote(pinOf(u.hostPub)), "hunter2-not-a-key",
			`credential-unavailable: git remote "box": ssh_key file:deploy-key: not usable as an ssh private key`},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, c.remote, func(cfg *Config) { cfg.Keystore = keyStore{key: c.key} })
			out, err := e.try("", "ls-remote", e.srv.URL+fmt.Sprintf("/git/localhost:%d%s.git", u.port, u.repo))
			if err == nil || !strings.Contains(out, c.want) || strings.Contains(out, "hunter2") {
				t.Fatalf("err=%v\n%s\nwant %s", err, out, c.want)
			}
		})
	}
}

// git's ssh command, read back by ssh itself (ssh -G): the address as
// HostName, the remote's pins under its name, the agent's socket and the
// key's public half only, no prompt, proxy, forwarding or shared
// connection. A directory whose path ssh would read otherwise (quotes,
// spaces) is refused.
func TestSSHCommand(t *testing.T) {
	standin.NeedSSH(t)
	u := &sshUpstream{remote: &policy.GitRemote{Name: "box", Host: "git.test", Port: 2222, SSH: &policy.GitSSH{User: "git",
		KnownHosts: []policy.KnownHost{{KeyType: "ssh-rsa"}, {KeyType: "ssh-ed25519"}, {KeyType: "ssh-rsa"}}}},
		addr: netip.MustParseAddr("10.1.2.3"), ssh: "ssh"}
	dir := filepath.Join(t.TempDir(), "d")
	cmd := u.command(filepath.Join(dir, "known_hosts"), filepath.Join(dir, "key.pub"), filepath.Join(dir, "agent.sock"))
	out, err := exec.Command("sh", "-c", cmd+" -G -p 2222 git@git.test").CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v: %s", cmd, err, out)
	}
	got := map[string]string{}
	for _, line := range strings.Split(string(out), "\n") {
		k, v, _ := strings.Cut(line, " ")
		got[k] = v
	}
	for k, want := range map[string]string{
		"hostname": "10.1.2.3", "hostkeyalias": "[git.test]:2222", "port": "2222", "user": "git",
		"hostkeyalgorithms": "rsa-sha2-512,rsa-sha2-256,ssh-ed25519", "stricthostkeychecking": "true",
		"userknownhostsfile": filepath.Join(dir, "known_hosts"), "globalknownhostsfile": "/dev/null",
		"identityagent": filepath.Join(dir, "agent.sock"), "identityfile": filepath.Join(dir, "key.pub"), "identitiesonly": "yes",
		"batchmode": "yes", "forwardagent": "no", "forwardx11": "no", "clearallforwardings": "yes", "controlmaster": "false",
		"controlpath": "", "proxycommand": "", "proxyjump": "", "checkhostip": "no", "permitlocalcommand": "no",
	} {
		if got[k] != want {
			t.Errorf("%s = %q, want %q", k, got[k], want)
		}
	}

	t.Setenv("TMPDIR", filepath.Join(t.TempDir(), "it's a dir; $(touch x)"))
	if err := os.Mkdir(os.Getenv("TMPDIR"), 0o700); err != nil {
		t.Fatal(err)
	}
	if _, _, err := u.session(&Proxy{}); err == nil || !strings.Contains(err.Error(), "letters, digits and /._- only") {
		t.Fatalf("session in a directory ssh reads otherwise: %v", err)
	}
	if left, _ := os.ReadDir(os.Getenv("TMPDIR")); len(left) != 0 {
		t.Errorf("left behind: %v", left)
	}
}
