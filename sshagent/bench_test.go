package sshagent_test

import (
	"net"
	"path/filepath"
	"testing"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/agent"

	"coily.dev/coily/sshagent"
)

// BenchmarkAgentStartStop measures an exec's agent coming and going: New,
// a listener on a unix socket, Start, Close.
// Run: go test -run '^$' -bench Agent ./sshagent/
func BenchmarkAgentStartStop(b *testing.B) {
	key, host := newSigner(b), newSigner(b)
	dir := b.TempDir()
	for b.Loop() {
		a, err := sshagent.New(sshagent.Config{Rule: "r", Keys: []sshagent.Key{{Name: "k", Signer: key, HostKeys: []ssh.PublicKey{host.PublicKey()}}}})
		if err != nil {
			b.Fatal(err)
		}
		sock := filepath.Join(dir, "a.sock")
		l, err := net.Listen("unix", sock)
		if err != nil {
			b.Fatal(err)
		}
		a.Start(l)
		a.Close()
	}
}

// BenchmarkAgentLogin measures what ssh asks of the agent for one login:
// connect, list, bind the session (a signature to verify), sign.
func BenchmarkAgentLogin(b *testing.B) {
	key, host := newSigner(b), newSigner(b)
	a, err := sshagent.New(sshagent.Config{Rule: "r", Keys: []sshagent.Key{{Name: "k", Signer: key, HostKeys: []ssh.PublicKey{host.PublicKey()}}}})
	if err != nil {
		b.Fatal(err)
	}
	sock := filepath.Join(b.TempDir(), "a.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		b.Fatal(err)
	}
	a.Start(l)
	defer a.Close()
	sid := sessionID(b)
	body := bindBody(b, host, sid, false)
	data := userauth(sid, key.PublicKey(), ssh.KeyAlgoED25519, host.PublicKey())
	for b.Loop() {
		c, err := net.Dial("unix", sock)
		if err != nil {
			b.Fatal(err)
		}
		cl := agent.NewClient(c)
		if _, err := cl.List(); err != nil {
			b.Fatal(err)
		}
		if _, err := cl.Extension(sshagent.SessionBindExtension, body); err != nil {
			b.Fatal(err)
		}
		if _, err := cl.Sign(key.PublicKey(), data); err != nil {
			b.Fatal(err)
		}
		c.Close()
	}
}
