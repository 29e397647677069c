package sshagent_test

import (
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/agent"

	"coily.dev/coily/internal/testlog"
	"coily.dev/coily/sshagent"
)

// count is how many lines hold want.
func count(lines []string, want string) int {
	n := 0
	for _, l := range lines {
		if strings.Contains(l, want) {
			n++
		}
	}
	return n
}

// A command that asks for signatures in a loop gets DefaultMaxSignatures
// of them and then refusals, and the log gets a line for the first
// signature of each key and host key, one for the refusal and a summary
// at Close: not one line per signature.
func TestAgentSignaturesBounded(t *testing.T) {
	key, key2, hostA, hostB := newSigner(t), newSigner(t), newSigner(t), newSigner(t)
	var log testlog.Buffer
	a, err := sshagent.New(sshagent.Config{Rule: "loop", Keys: []sshagent.Key{
		{Name: "file:a", Signer: key, HostKeys: []ssh.PublicKey{hostA.PublicKey()}, Hosts: "a"},
		{Name: "file:b", Signer: key2, HostKeys: []ssh.PublicKey{hostB.PublicKey()}, Hosts: "b"},
	}, Logger: slog.New(slog.NewTextHandler(&log, nil))})
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(shortTemp(t), "a.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	a.Start(l)
	t.Cleanup(a.Close)
	connect := func(host ssh.Signer) (agent.ExtendedAgent, []byte) {
		c, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		cl, sid := agent.NewClient(c), sessionID(t)
		if err := bind(t, cl, host, sid); err != nil {
			t.Fatal(err)
		}
		return cl, sid
	}
	clB, sidB := connect(hostB)
	if _, err := clB.Sign(key2.PublicKey(), userauth(sidB, key2.PublicKey(), ssh.KeyAlgoED25519, nil)); err != nil {
		t.Fatal(err)
	}
	clA, sidA := connect(hostA)
	data := userauth(sidA, key.PublicKey(), ssh.KeyAlgoED25519, nil)
	for i := 1; i < sshagent.DefaultMaxSignatures; i++ {
		if _, err := clA.Sign(key.PublicKey(), data); err != nil {
			t.Fatalf("signature %d: %v (%q)", i+1, err, a.Report().Refused)
		}
	}
	for i := 0; i < 5; i++ {
		if _, err := clA.Sign(key.PublicKey(), data); err == nil {
			t.Fatalf("signed past the cap")
		}
		if _, err := clB.Sign(key2.PublicKey(), userauth(sidB, key2.PublicKey(), ssh.KeyAlgoED25519, nil)); err == nil {
			t.Fatalf("signed past the cap on another connection")
		}
	}
	rep := a.Report()
	if rep.Signed != sshagent.DefaultMaxSignatures || len(rep.Refused) != 2 || rep.More != 0 ||
		!strings.Contains(rep.Refused[0].String(), "refused to sign with key file:a: the agent made its 1000 signatures for this exec already") {
		t.Fatalf("report %+v", rep)
	}
	a.Close()
	a.Close()
	lines := log.Lines()
	if len(lines) != 5 || count(lines, `msg="ssh agent signed"`) != 2 || count(lines, `msg="ssh agent refused"`) != 2 ||
		count(lines, `msg="ssh agent closed" rule=loop signed=1000 signed_unlogged=998`) != 1 {
		t.Fatalf("log:\n%s", strings.Join(lines, "\n"))
	}
}

// MaxSignatures sets the cap.
func TestAgentMaxSignatures(t *testing.T) {
	key, host := newSigner(t), newSigner(t)
	a, err := sshagent.New(sshagent.Config{Rule: "r", MaxSignatures: 3,
		Keys: []sshagent.Key{{Name: "file:a", Signer: key, HostKeys: []ssh.PublicKey{host.PublicKey()}, Hosts: "a"}}})
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(shortTemp(t), "a.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	a.Start(l)
	defer a.Close()
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cl, sid := agent.NewClient(c), sessionID(t)
	if err := bind(t, cl, host, sid); err != nil {
		t.Fatal(err)
	}
	data := userauth(sid, key.PublicKey(), ssh.KeyAlgoED25519, nil)
	for i := 0; i < 4; i++ {
		_, err := cl.Sign(key.PublicKey(), data)
		if (err == nil) != (i < 3) {
			t.Fatalf("signature %d: %v", i+1, err)
		}
	}
	if rep := a.Report(); rep.Signed != 3 || len(rep.Refused) != 1 || !strings.Contains(rep.Refused[0].String(), "its 3 signatures") {
		t.Fatalf("report %+v", rep)
	}
}
