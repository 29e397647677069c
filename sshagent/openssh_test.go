//go:build linux

package sshagent_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"

	"coily.dev/coily/cmdtext"
	"coily.dev/coily/internal/standin"
	"coily.dev/coily/sshagent"
)

// sshEnv is a real OpenSSH setup: two sshd servers with their own host
// keys that accept the agent's key, and a known_hosts file pinning both.
type sshEnv struct {
	user        string
	dir         string
	ports       [2]int
	hostKeys    [2]ssh.PublicKey
	knownHosts  string
	signer      ssh.Signer
	privateFile string
}

func newSSHEnv(t *testing.T) *sshEnv {
	t.Helper()
	e := &sshEnv{user: standin.NeedSSH(t), dir: shortTemp(t)}
	e.privateFile = filepath.Join(e.dir, "id_ed25519")
	standin.SSHKeygen(t, e.privateFile)
	key, err := os.ReadFile(e.privateFile)
	if err != nil {
		t.Fatal(err)
	}
	if e.signer, err = sshagent.ParsePrivateKey(string(key)); err != nil {
		t.Fatal(err)
	}
	var kh bytes.Buffer
	for i := range e.ports {
		srv := filepath.Join(e.dir, fmt.Sprintf("srv%d", i))
		if err := os.Mkdir(srv, 0o755); err != nil {
			t.Fatal(err)
		}
		standin.SSHKeygen(t, filepath.Join(srv, "host_key"))
		if err := os.WriteFile(filepath.Join(srv, "authorized_keys"), ssh.MarshalAuthorizedKey(e.signer.PublicKey()), 0o644); err != nil {
			t.Fatal(err)
		}
		e.ports[i] = standin.SSHD(t, srv)
		pub, err := os.ReadFile(filepath.Join(srv, "host_key.pub"))
		if err != nil {
			t.Fatal(err)
		}
		if e.hostKeys[i], _, _, _, err = ssh.ParseAuthorizedKey(pub); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&kh, "[127.0.0.1]:%d %s", e.ports[i], pub)
	}
	e.knownHosts = filepath.Join(e.dir, "known_hosts")
	if err := os.WriteFile(e.knownHosts, kh.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return e
}

// host names server i as known_hosts does.
func (e *sshEnv) host(i int) string { return fmt.Sprintf("[127.0.0.1]:%d", e.ports[i]) }

// agent serves the key for server 0 only on a socket in the test's
// directory until the test ends.
func (e *sshEnv) agent(t *testing.T) (*sshagent.Agent, string) {
	t.Helper()
	a, err := sshagent.New(sshagent.Config{Rule: "git-ssh", Keys: []sshagent.Key{{
		Name: "file:deploy", Signer: e.signer, HostKeys: []ssh.PublicKey{e.hostKeys[0]}, Hosts: e.host(0)}},
		PinnedFor: map[string]string{ssh.FingerprintSHA256(e.hostKeys[0]): e.host(0), ssh.FingerprintSHA256(e.hostKeys[1]): e.host(1)}})
	if err != nil {
		t.Fatal(err)
	}
	return a, serve(t, a)
}

// ssh runs the real ssh client against server i with the agent at sock
// and no key of its own; it returns ssh's stderr (-v) and whether it
// authenticated.
func (e *sshEnv) ssh(t *testing.T, sock string, i int) (string, bool) {
	t.Helper()
	home := shortTemp(t)
	cmd := exec.Command("ssh", "-v", "-F", "/dev/null", "-o", "UserKnownHostsFile="+e.knownHosts, "-o", "GlobalKnownHostsFile=/dev/null",
		"-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes", "-o", "IdentityFile="+filepath.Join(home, "none"),
		"-p", fmt.Sprint(e.ports[i]), e.user+"@127.0.0.1", "true")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + home, "SSH_AUTH_SOCK=" + sock}
	out, _ := cmd.CombinedOutput()
	return string(out), strings.Contains(string(out), "Authenticated to 127.0.0.1")
}

// The real OpenSSH client authenticates through the agent to the host
// the key is for (it binds the session first, and the agent checks the
// bind), and gets no signature for a host whose pinned key is not the
// key's, though that host would accept the key.
func TestOpenSSHThroughAgent(t *testing.T) {
	e := newSSHEnv(t)
	a, sock := e.agent(t)
	out, ok := e.ssh(t, sock, 0)
	if !ok || !strings.Contains(out, "bound agent to hostkey") {
		t.Fatalf("ssh did not authenticate through the agent after binding it:\n%s", out)
	}
	if r := a.Report(); r.Signed != 1 || len(r.Refused) != 0 {
		t.Fatalf("report %+v, want one signature and no refusal", r)
	}

	out, ok = e.ssh(t, sock, 1)
	if ok || !strings.Contains(out, "agent refused operation") {
		t.Fatalf("ssh authenticated to a host the key is not for, or not for want of a signature:\n%s", out)
	}
	r := a.Report()
	want := fmt.Sprintf("refused the session with host key %s (pinned for %s): the rule pins it for no host of its ssh_keys; it signs nothing more on that connection",
		ssh.FingerprintSHA256(e.hostKeys[1]), e.host(1))
	if r.Signed != 1 || len(r.Refused) != 2 || r.Refused[0].String() != want || !strings.Contains(r.Refused[1].String(), "a session bind was refused on its connection") {
		t.Fatalf("report %+v\nwant the bind refused: %s", r, want)
	}
}

// OpenSSH's own tools against the agent: ssh-add lists the key and may
// neither add, remove nor lock; ssh-keygen -Y sign (what git's ssh commit
// signing runs) gets no signature: that is not a user authentication.
func TestOpenSSHToolsRefused(t *testing.T) {
	e := newSSHEnv(t)
	a, sock := e.agent(t)
	run := func(name string, args ...string) (string, error) {
		cmd := exec.Command(name, args...)
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + shortTemp(t), "SSH_AUTH_SOCK=" + sock}
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := run("ssh-add", "-l"); err != nil || !strings.Contains(out, ssh.FingerprintSHA256(e.signer.PublicKey())+" file:deploy") {
		t.Fatalf("ssh-add -l: %v: %s", err, out)
	}
	other := filepath.Join(shortTemp(t), "other")
	standin.SSHKeygen(t, other)
	msg := filepath.Join(shortTemp(t), "msg")
	if err := os.WriteFile(msg, []byte("commit\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"ssh-add", other}, {"ssh-add", "-D"}, {"ssh-add", "-d", e.privateFile + ".pub"},
		{"ssh-add", "-t", "60", other}} {
		if out, err := run(args[0], args[1:]...); err == nil {
			t.Errorf("%q succeeded: %s", args, out)
		}
	}
	if out, err := run("ssh-keygen", "-Y", "sign", "-n", "git", "-f", e.privateFile+".pub", msg); err == nil {
		t.Errorf("ssh-keygen -Y sign through the agent succeeded: %s", out)
	}
	if out, err := run("ssh-add", "-l"); err != nil || strings.Count(out, "\n") != 1 {
		t.Fatalf("after the refusals, ssh-add -l: %v: %s", err, out)
	}
	r := a.Report()
	if r.Signed != 0 {
		t.Fatalf("report %+v: signed", r)
	}
	for _, want := range []string{"refused to add a key", "refused to remove all keys", "refused to remove a key", "refused to add a constrained key",
		"refused to sign with key file:deploy: no session is bound"} {
		if !slices.ContainsFunc(r.Refused, func(s cmdtext.Text) bool { return strings.Contains(s.String(), want) }) {
			t.Errorf("no refusal %q in %q", want, r.Refused)
		}
	}
}
