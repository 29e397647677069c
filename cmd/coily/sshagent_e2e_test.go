//go:build linux

package main

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"

	"coily.dev/coily/internal/standin"
	"coily.dev/coily/internal/testserver"
	"coily.dev/coily/internal/vaulttest"
	"coily.dev/coily/workspace"
)

// otherHost is a second ssh server's name: pinned and reachable, but not
// a host the rule's ssh key is for.
const otherHost = "other.test"

// sshServer is a real sshd serving a bare repository, with its host key
// pinned as the policy writes it.
type sshServer struct {
	port int
	bare string
	pin  string // the ssh_known_hosts line
	fp   string // the host key's SHA256 fingerprint
}

// startGitSSHD starts sshd for name, accepting the public key in pub.
func startGitSSHD(t *testing.T, name string, pub []byte) sshServer {
	t.Helper()
	dir := shortDir(t)
	standin.SSHKeygen(t, filepath.Join(dir, "host_key"))
	if err := os.WriteFile(filepath.Join(dir, "authorized_keys"), pub, 0o644); err != nil {
		t.Fatal(err)
	}
	s := sshServer{bare: seedBareRepo(t, dir), port: standin.SSHD(t, dir)}
	hostPub, err := os.ReadFile(filepath.Join(dir, "host_key.pub"))
	if err != nil {
		t.Fatal(err)
	}
	key, _, _, _, err := ssh.ParseAuthorizedKey(hostPub)
	if err != nil {
		t.Fatal(err)
	}
	s.fp = ssh.FingerprintSHA256(key)
	s.pin = fmt.Sprintf("[%s]:%d %s %s", name, s.port, key.Type(), base64.StdEncoding.EncodeToString(key.Marshal()))
	return s
}

// keyForms are the forms in which a private key's bytes could leak: the
// file, each line of its base64 body, the file in base64, and the raw
// Ed25519 seed with its hex and base64.
func keyForms(t *testing.T, pemKey []byte) [][]byte {
	t.Helper()
	raw, err := ssh.ParseRawPrivateKey(pemKey)
	if err != nil {
		t.Fatal(err)
	}
	seed := raw.(*ed25519.PrivateKey).Seed()
	forms := [][]byte{pemKey, []byte(base64.StdEncoding.EncodeToString(pemKey)), seed,
		[]byte(hex.EncodeToString(seed)), []byte(base64.StdEncoding.EncodeToString(seed))}
	for _, line := range bytes.Split(pemKey, []byte("\n")) {
		if len(line) >= 20 && !bytes.HasPrefix(line, []byte("-----")) {
			forms = append(forms, line)
		}
	}
	return forms
}

// noKeyIn fails t when a form of the key is in any file under the roots.
func noKeyIn(t *testing.T, forms [][]byte, roots ...string) {
	t.Helper()
	for _, root := range roots {
		err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil || !d.Type().IsRegular() {
				return nil // gone meanwhile, or a socket: nothing to read
			}
			data, err := os.ReadFile(path)
			if err != nil {
				t.Errorf("read %s: %v", path, err)
				return nil
			}
			for _, f := range forms {
				if bytes.Contains(data, f) {
					t.Errorf("%s holds the private key (a form of %d bytes)", path, len(f))
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

// git over ssh through `coily serve` with a key held by coily: the key
// lives in a real Vault; the rule names it in ssh_keys for git.test
// only; ssh inside the sandbox finds it through the exec's agent
// (SSH_AUTH_SOCK), clones, commits and pushes. The same key is refused
// for other.test, which the rule pins and reaches but does not give the
// key for: the push fails, and coily says why. Afterwards no byte of the
// key is in the workspace, the server's state (scratch directory, audit
// log, store), its log or any output, and no agent socket is left.
func TestCLIExecGitOverSSH(t *testing.T) {
	requireBwrap(t)
	me := standin.NeedSSH(t)
	v := vaulttest.Start(t)

	// The deploy key, as its owner makes it, away from everything coily
	// or the sandbox sees; stored in Vault KV, as docs/credentials.md says.
	keys := shortDir(t)
	standin.SSHKeygen(t, filepath.Join(keys, "id_ed25519"))
	pemKey, err := os.ReadFile(filepath.Join(keys, "id_ed25519"))
	if err != nil {
		t.Fatal(err)
	}
	pub, err := os.ReadFile(filepath.Join(keys, "id_ed25519.pub"))
	if err != nil {
		t.Fatal(err)
	}
	forms := keyForms(t, pemKey)
	if _, err := v.Client(t, v.RootToken).KVv2("secret").Put(context.Background(), "coily/deploy",
		map[string]any{"private_key": string(pemKey)}); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(keys); err != nil {
		t.Fatal(err)
	}
	t.Setenv("VAULT_ADDR", v.Addr)
	t.Setenv("VAULT_TOKEN", v.RootToken)

	git, other := startGitSSHD(t, gitHost, pub), startGitSSHD(t, otherHost, pub)
	dir := shortDir(t)
	ws := filepath.Join(shortDir(t), "ws") // not in the state directory, private to the server
	if err := os.Mkdir(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	testserver.SandboxWorkspace(t, ws) // a root server's sandbox user writes it
	p := startServe(t, dir, writePolicy(t, dir, fmt.Sprintf(`version: 1
workspaces: {repo: %s}
roles: {operator: {permissions: [exec], commands: [git-ssh]}}
commands:
  - name: git-ssh
    binary: /bin/sh
    args: ["**"]
    flags: any
    workspace: repo
    network: proxied
    egress:
      allow: ["%s:%d", "%s:%d"]
      allow_cidrs: [127.0.0.0/8]
      hosts: {%s: [127.0.0.1], %s: [127.0.0.1]}
      ssh_known_hosts: [%q, %q]
    ssh_keys:
      - key: "vault:secret/coily/deploy#private_key"
        hosts: ["[%s]:%d"]
`, ws, gitHost, git.port, otherHost, other.port, gitHost, otherHost, git.pin, other.pin, gitHost, git.port)), "--vault-auth", "token")

	rc := newRecipeCanary(t) // the recipe's canary: argv during the execs, then outputs, logs and files
	for i, f := range forms {
		rc.Add(fmt.Sprintf("form %d of the deploy key", i), f)
	}
	run := func(script string) cliRun {
		t.Helper()
		return rc.run(t, p, "exec", "--", "/bin/sh", "-c", script)
	}
	url := fmt.Sprintf("ssh://%s@%s:%d%s", me, gitHost, git.port, git.bare)
	r := run(`set -e
[ "$SSH_AUTH_SOCK" = /run/coily/agent.sock ]
if env | grep -q -e COILY_SSH -e 'PRIVATE KEY'; then echo 'the key is in the environment' >&2; exit 9; fi
if grep -rqs --exclude=bridge -e 'PRIVATE KEY' /run/coily "$HOME" /tmp; then echo 'the key is in a file' >&2; exit 9; fi
ssh-add -l
git clone -q ` + shellQuote(url) + ` clone
cd clone
echo pushed > pushed.txt
git add pushed.txt
git -c user.name=sandbox -c user.email=sandbox@example.com commit -qm 'pushed through coily'
git push -q origin main`)
	if r.code != 0 {
		t.Fatalf("clone and push through coily: %+v\n%s", r, p.log)
	}
	if !strings.Contains(r.stdout, " vault:secret/coily/deploy#private_key (ED25519)") {
		t.Errorf("ssh-add -l in the sandbox does not list the key by its reference: %q", r.stdout)
	}
	if got := gitOut(t, "--git-dir", git.bare, "log", "-1", "--format=%s", "main"); got != "pushed through coily" {
		t.Fatalf("the push did not land: last commit %q", got)
	}

	// A push with the same key to the other server: pinned and reachable,
	// and it would accept the key, but the rule does not give the key for
	// it. (A new repository: the clone's .git, made by the last command,
	// was set aside by the workspace's check.)
	before := gitOut(t, "--git-dir", other.bare, "rev-parse", "main")
	otherURL := fmt.Sprintf("ssh://%s@%s:%d%s", me, otherHost, other.port, other.bare)
	r = run(`set -e
git init -q -b main fresh
cd fresh
git -c user.name=sandbox -c user.email=sandbox@example.com commit -q --allow-empty -m 'not for other.test'
git push -q ` + shellQuote(otherURL) + ` main`)
	want := fmt.Sprintf(`coily: ssh agent of rule "git-ssh" refused the session with host key %s (pinned for [%s]:%d): the rule pins it for no host of its ssh_keys`,
		other.fp, otherHost, other.port)
	if r.code == 0 || !strings.Contains(r.stderr, "agent refused operation") || !strings.Contains(r.stderr, want) {
		t.Errorf("push to %s: want ssh's \"agent refused operation\" and %q, got %+v", otherHost, want, r)
	}
	if after := gitOut(t, "--git-dir", other.bare, "rev-parse", "main"); after != before {
		t.Errorf("a push without a signature landed on %s", otherHost)
	}

	// The audit records name the key and count what the agent did.
	recs := egressRecords(t, dir)
	if len(recs) != 2 {
		t.Fatalf("%d exec.result records", len(recs))
	}
	ref := fmt.Sprintf("vault:secret/coily/deploy#private_key=[%s]:%d", gitHost, git.port)
	if d, l := recs[0].Details, recs[0].Lists; !slices.Equal(l["ssh_keys"], []string{ref}) || d["ssh_agent_signed"] != "2" || len(l["ssh_agent_refused"]) != 0 {
		t.Errorf("first record's details %v %v: want ssh_keys %s, 2 signatures (clone, push), no refusal", d, l, ref)
	}
	if d, l := recs[1].Details, recs[1].Lists; d["ssh_agent_signed"] != "0" || !strings.Contains(strings.Join(l["ssh_agent_refused"], "\n"), other.fp) {
		t.Errorf("second record's details %v %v: want no signature and the refused session", d, l)
	}
	// What each run used, apart from the rule's keys: the same rule, one
	// signed twice, the other not at all.
	if u := recs[0].CredentialsUsed; !slices.Contains(u, "ssh agent key vault:secret/coily/deploy#private_key: 2 signature(s)") {
		t.Errorf("first record's credentials_used %q: want the key's 2 signatures", u)
	}
	if u := recs[1].CredentialsUsed; slices.ContainsFunc(u, func(s string) bool { return strings.HasPrefix(s, "ssh agent key") }) {
		t.Errorf("second record's credentials_used %q: no key signed", u)
	}
	if row, ok := findRow(recs[0].Egress, gitHost, git.port, "allow"); !ok || row.Conns != 2 {
		t.Errorf("rows %+v, want one allow row with 2 connections (clone, push)", recs[0].Egress)
	}

	// No byte of the key anywhere: the workspace, everything the server
	// keeps (its scratch directory, audit log, store), its log, the
	// outputs; and no agent socket outlived its exec.
	rc.finish(t, p, []string{"exec\x00--\x00/bin/sh\x00-c\x00set -e\n"}, ws)
	noKeyIn(t, forms, ws, dir)
	scratch := filepath.Join(dir, "scratch")
	if os.Geteuid() == 0 {
		scratch = workspace.RootScratchDir(dir) // a root server's, outside its private state directory
		noKeyIn(t, forms, scratch)
	}
	entries, err := os.ReadDir(scratch)
	if errors.Is(err, fs.ErrNotExist) {
		err = nil // removed once empty, at stop
	}
	if err != nil || len(entries) != 0 {
		t.Errorf("the scratch directory holds %v (%v) after the execs", entries, err)
	}
}
