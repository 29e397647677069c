package sshagent_test

import (
	"bytes"
	"crypto/rand"
	"crypto/rsa"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/agent"

	"coily.dev/coily/cmdtext"
	"coily.dev/coily/internal/canary"
	"coily.dev/coily/scrub"
	"coily.dev/coily/sshagent"
)

// rig is an agent holding key for hostA only, and a second key for hostB
// only, on a unix socket.
type rig struct {
	a                  *sshagent.Agent
	sock               string
	key, key2          ssh.Signer
	hostA, hostB, evil ssh.Signer
}

func newRig(t *testing.T) *rig {
	t.Helper()
	r := &rig{key: newSigner(t), key2: newSigner(t), hostA: newSigner(t), hostB: newSigner(t), evil: newSigner(t)}
	fp := ssh.FingerprintSHA256
	a, err := sshagent.New(sshagent.Config{Rule: "git-ssh", Keys: []sshagent.Key{
		{Name: "vault:secret/coily/deploy#private_key", Signer: r.key, HostKeys: []ssh.PublicKey{r.hostA.PublicKey()}, Hosts: "git.example.com"},
		{Name: "file:other", Signer: r.key2, HostKeys: []ssh.PublicKey{r.hostB.PublicKey()}, Hosts: "other.example.com"},
	}, PinnedFor: map[string]string{fp(r.hostA.PublicKey()): "git.example.com", fp(r.hostB.PublicKey()): "other.example.com"}})
	if err != nil {
		t.Fatal(err)
	}
	r.a, r.sock = a, serve(t, a)
	return r
}

// serve serves a on a unix socket in the test's directory until the test
// ends, and returns the socket's path.
func serve(t *testing.T, a *sshagent.Agent) string {
	t.Helper()
	sock := filepath.Join(shortTemp(t), "agent.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	a.Start(l)
	t.Cleanup(a.Close)
	return sock
}

// client is a fresh connection to the agent through x/crypto's client.
func (r *rig) client(t *testing.T) agent.ExtendedAgent {
	t.Helper()
	c, err := net.Dial("unix", r.sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return agent.NewClient(c)
}

// bind binds a session with host (sid) on the connection of c.
func bind(t *testing.T, c agent.ExtendedAgent, host ssh.Signer, sid []byte) error {
	t.Helper()
	_, err := c.Extension(sshagent.SessionBindExtension, bindBody(t, host, sid, false))
	return err
}

func (r *rig) refused(t *testing.T, want string) {
	t.Helper()
	for _, s := range r.a.Report().Refused {
		if strings.Contains(s.String(), want) {
			return
		}
	}
	t.Errorf("no refusal %q in %q", want, r.a.Report().Refused)
}

func TestAgentListsItsKeys(t *testing.T) {
	r := newRig(t)
	keys, err := r.client(t).List()
	if err != nil || len(keys) != 2 || !bytes.Equal(keys[0].Blob, r.key.PublicKey().Marshal()) ||
		keys[0].Comment != "vault:secret/coily/deploy#private_key" || keys[1].Comment != "file:other" {
		t.Fatalf("List() = %v, %v", keys, err)
	}
}

// A bound session with a pinned host key gets a signature over its user
// authentication request, by both methods, and the signature verifies.
func TestAgentSignsForBoundSession(t *testing.T) {
	r := newRig(t)
	c := r.client(t)
	sid := sessionID(t)
	if err := bind(t, c, r.hostA, sid); err != nil {
		t.Fatal(err)
	}
	for _, host := range []ssh.PublicKey{nil, r.hostA.PublicKey()} {
		data := userauth(sid, r.key.PublicKey(), ssh.KeyAlgoED25519, host)
		sig, err := c.Sign(r.key.PublicKey(), data)
		if err != nil {
			t.Fatalf("hostbound %v: %v (%q)", host != nil, err, r.a.Report().Refused)
		}
		if err := r.key.PublicKey().Verify(data, sig); err != nil {
			t.Fatal(err)
		}
	}
	// The second key, for host B, is refused in host A's session.
	if _, err := c.Sign(r.key2.PublicKey(), userauth(sid, r.key2.PublicKey(), ssh.KeyAlgoED25519, nil)); err == nil {
		t.Fatal("signed with the key for host B in host A's session")
	}
	r.refused(t, "refused to sign with key file:other for the session with host key "+ssh.FingerprintSHA256(r.hostA.PublicKey())+
		" (pinned for git.example.com): the rule gives this key for other.example.com only")
	if rep := r.a.Report(); rep.Signed != 2 || len(rep.Refused) != 1 || !slices.Equal(rep.SignedBy, []int{2, 0}) {
		t.Fatalf("report %+v", rep) // SignedBy: which key signed, for the record's credentials_used
	}
}

// What the agent refuses to sign, on a connection with a bound session.
func TestAgentRefusesToSign(t *testing.T) {
	r := newRig(t)
	sid := sessionID(t)
	kpub := r.key.PublicKey()
	for _, c := range []struct {
		name  string
		setup func(agent.ExtendedAgent) // binds (or not) first
		key   ssh.PublicKey
		data  []byte
		flags agent.SignatureFlags
		want  string
	}{
		{name: "no bind", key: kpub, data: userauth(sid, kpub, "ssh-ed25519", nil), want: "no session is bound"},
		{name: "not a user authentication request", data: []byte("tree 4b825dc6\n"), key: kpub, want: "what is not an ssh user authentication request"},
		{name: "another session", key: kpub, data: userauth(sessionID(t), kpub, "ssh-ed25519", nil), want: "for a session other than the one bound"},
		{name: "an older session", key: kpub, data: userauth(sid, kpub, "ssh-ed25519", nil), want: "for a session other than the one bound",
			setup: func(c agent.ExtendedAgent) { _ = bind(t, c, r.hostA, sid); _ = bind(t, c, r.hostA, sessionID(t)) }},
		{name: "request names another key", key: kpub, data: userauth(sid, r.key2.PublicKey(), "ssh-ed25519", nil), want: "a request naming another key"},
		{name: "another algorithm", key: kpub, data: userauth(sid, kpub, "ssh-rsa", nil), want: `not "ssh-rsa"`},
		{name: "flags for an Ed25519 key", key: kpub, data: userauth(sid, kpub, "ssh-ed25519", nil), flags: agent.SignatureFlagRsaSha256, want: "no flags"},
		{name: "hostbound naming another host key", key: kpub, data: userauth(sid, kpub, "ssh-ed25519", r.hostB.PublicKey()), want: "another host key than the bound session's"},
		{name: "a key it does not hold", key: r.evil.PublicKey(), data: userauth(sid, r.evil.PublicKey(), "ssh-ed25519", nil), want: "a key it does not hold"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cl := r.client(t)
			switch {
			case c.setup != nil:
				c.setup(cl)
			case c.name != "no bind":
				if err := bind(t, cl, r.hostA, sid); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := cl.SignWithFlags(c.key, c.data, c.flags); err == nil {
				t.Fatal("signed")
			}
			r.refused(t, c.want)
		})
	}
	if n := r.a.Report().Signed; n != 0 {
		t.Fatalf("%d signatures", n)
	}
}

// Binds the agent refuses, after which the connection signs nothing,
// even for a session bound well before.
func TestAgentRefusesBinds(t *testing.T) {
	r := newRig(t)
	for _, c := range []struct {
		name string
		body func(sid []byte) []byte
		want string
	}{
		{name: "host key pinned for another key's host only... is accepted", body: nil},
		{name: "unpinned host key", body: func(sid []byte) []byte { return bindBody(t, r.evil, sid, false) },
			want: "refused the session with host key " + ssh.FingerprintSHA256(r.evil.PublicKey()) + " (not pinned by the rule): the rule pins it for no host of its ssh_keys"},
		{name: "forwarded", body: func(sid []byte) []byte { return bindBody(t, r.hostA, sid, true) }, want: "forwarded agent"},
		{name: "bad signature", body: func(sid []byte) []byte {
			return wire(nil).str(r.hostA.PublicKey().Marshal()).str(sid).str(ssh.Marshal(mustSign(t, r.evil, sid))).b(0)
		}, want: "does not verify"},
		{name: "malformed", body: func(sid []byte) []byte { return []byte{0, 0, 0, 1} }, want: "refused a session bind: malformed"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cl := r.client(t)
			sid := sessionID(t)
			if err := bind(t, cl, r.hostA, sid); err != nil {
				t.Fatal(err)
			}
			if c.body == nil {
				// Host B is pinned for the second key: its session binds.
				if err := bind(t, cl, r.hostB, sessionID(t)); err != nil {
					t.Fatal(err)
				}
				return
			}
			_, err := cl.Extension(sshagent.SessionBindExtension, c.body(sessionID(t)))
			if !errors.Is(err, agent.ErrExtensionUnsupported) {
				t.Fatalf("bind: %v, want a failure", err)
			}
			r.refused(t, c.want)
			// The connection is done: not even host A's session is signed.
			if _, err := cl.Sign(r.key.PublicKey(), userauth(sid, r.key.PublicKey(), "ssh-ed25519", nil)); err == nil {
				t.Fatal("signed after a refused bind")
			}
			r.refused(t, "a session bind was refused on its connection")
			if err := bind(t, cl, r.hostA, sessionID(t)); err == nil {
				t.Fatal("a bind after a refused one was accepted")
			}
		})
	}
	if n := r.a.Report().Signed; n != 0 {
		t.Fatalf("%d signatures", n)
	}
}

// Sixteen sessions bind on one connection, not seventeen.
func TestAgentBindsBounded(t *testing.T) {
	r := newRig(t)
	cl := r.client(t)
	for i := 0; i < 16; i++ {
		if err := bind(t, cl, r.hostA, sessionID(t)); err != nil {
			t.Fatalf("bind %d: %v", i, err)
		}
	}
	if err := bind(t, cl, r.hostA, sessionID(t)); err == nil {
		t.Fatal("a 17th bind was accepted")
	}
	r.refused(t, "16 sessions are bound on the connection already")
}

// Adding, removing and locking keys are refused and change nothing.
func TestAgentRefusesToChange(t *testing.T) {
	r := newRig(t)
	cl := r.client(t)
	priv, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	for name, call := range map[string]func() error{
		"add a key":              func() error { return cl.Add(agent.AddedKey{PrivateKey: priv}) },
		"add a constrained key":  func() error { return cl.Add(agent.AddedKey{PrivateKey: priv, LifetimeSecs: 60}) },
		"remove a key":           func() error { return cl.Remove(r.key.PublicKey()) },
		"remove all keys":        cl.RemoveAll,
		"lock the agent":         func() error { return cl.Lock([]byte("pass")) },
		"unlock the agent":       func() error { return cl.Unlock([]byte("pass")) },
		`extension "query"`:      func() error { _, err := cl.Extension("query", nil); return err },
		`extension "add-key@x"`:  func() error { _, err := cl.Extension("add-key@x", []byte("k")); return err },
		"(a name of 200 bytes)":  func() error { _, err := cl.Extension(strings.Repeat("x", 200), nil); return err },
		"(a name of 4 bytes)":    func() error { _, err := cl.Extension("a\x1b[m", nil); return err },
		"refused request type 0": func() error { return rawRequest(t, r.sock, []byte{0}) },
	} {
		if err := call(); err == nil {
			t.Errorf("%s: accepted", name)
		}
		r.refused(t, name)
	}
	keys, err := cl.List()
	if err != nil || len(keys) != 2 {
		t.Fatalf("after the refusals: %v, %v", keys, err)
	}
}

// rawRequest sends one message and fails unless the answer is
// SSH_AGENT_FAILURE.
func rawRequest(t *testing.T, sock string, msg []byte) error {
	t.Helper()
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write(binary.BigEndian.AppendUint32(nil, uint32(len(msg)))); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write(msg); err != nil {
		t.Fatal(err)
	}
	reply := make([]byte, 5)
	if _, err := io.ReadFull(c, reply); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(reply, []byte{0, 0, 0, 1, 5}) {
		t.Fatalf("reply %v, want SSH_AGENT_FAILURE", reply)
	}
	return errors.New("failure")
}

// An oversized or empty message closes the connection.
func TestAgentClosesOnOversizedMessage(t *testing.T) {
	r := newRig(t)
	for _, size := range []uint32{0, 64<<10 + 1, 1 << 31} {
		c, err := net.Dial("unix", r.sock)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Write(binary.BigEndian.AppendUint32(nil, size)); err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if n, err := c.Read(make([]byte, 1)); err != io.EOF {
			t.Errorf("size %d: read %d, %v; want the connection closed", size, n, err)
		}
		c.Close()
	}
	r.refused(t, "more than 65536 bytes")
}

// Close ends every connection and the listener.
func TestAgentClose(t *testing.T) {
	r := newRig(t)
	c, err := net.Dial("unix", r.sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cl := agent.NewClient(c)
	if _, err := cl.List(); err != nil {
		t.Fatal(err)
	}
	r.a.Close()
	if _, err := cl.List(); err == nil {
		t.Fatal("a connection outlived Close")
	}
	if c2, err := net.Dial("unix", r.sock); err == nil {
		c2.Close()
		t.Fatal("the listener outlived Close")
	}
}

// An RSA key signs with rsa-sha2-256 or -512 as asked, never SHA-1.
func TestAgentRSAKey(t *testing.T) {
	priv, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	host := newSigner(t)
	a, err := sshagent.New(sshagent.Config{Rule: "r", Keys: []sshagent.Key{{Name: "file:rsa", Signer: key, HostKeys: []ssh.PublicKey{host.PublicKey()}, Hosts: "h"}}})
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
	cl := agent.NewClient(c)
	sid := sessionID(t)
	if err := bind(t, cl, host, sid); err != nil {
		t.Fatal(err)
	}
	for _, s := range []struct {
		alg   string
		flags agent.SignatureFlags
		ok    bool
	}{
		{ssh.KeyAlgoRSASHA256, agent.SignatureFlagRsaSha256, true},
		{ssh.KeyAlgoRSASHA512, agent.SignatureFlagRsaSha512, true},
		{ssh.KeyAlgoRSA, 0, false},
		{ssh.KeyAlgoRSASHA256, agent.SignatureFlagRsaSha512, false},
		{ssh.KeyAlgoRSASHA512, 0, false},
	} {
		data := userauth(sid, key.PublicKey(), s.alg, nil)
		sig, err := cl.SignWithFlags(key.PublicKey(), data, s.flags)
		if (err == nil) != s.ok {
			t.Errorf("%s flags %d: %v", s.alg, s.flags, err)
			continue
		}
		if s.ok && (sig.Format != s.alg || key.PublicKey().Verify(data, sig) != nil) {
			t.Errorf("%s: signature %s does not verify", s.alg, sig.Format)
		}
	}
}

func TestNewRefusesBadConfig(t *testing.T) {
	k, h := newSigner(t), newSigner(t).PublicKey()
	for name, cfg := range map[string]sshagent.Config{
		"no key":      {},
		"no host key": {Keys: []sshagent.Key{{Name: "a", Signer: k}}},
		"no signer":   {Keys: []sshagent.Key{{Name: "a", HostKeys: []ssh.PublicKey{h}}}},
		"a key twice": {Keys: []sshagent.Key{{Name: "a", Signer: k, HostKeys: []ssh.PublicKey{h}}, {Name: "b", Signer: k, HostKeys: []ssh.PublicKey{h}}}},
	} {
		if _, err := sshagent.New(cfg); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// What a command names in its requests (an extension's name, a signature
// algorithm) reaches the exec's answer, the audit log and the server's log
// only with the exec's credentials redacted, even spelled with its case
// changed or split.
func TestRefusalsCarryNoSecret(t *testing.T) {
	const token = "ghp_AgentCanary0123456789abc"
	host := newSigner(t)
	var logs bytes.Buffer
	a, err := sshagent.New(sshagent.Config{Rule: "git-ssh", Keys: []sshagent.Key{
		{Name: "file:deploy", Signer: newSigner(t), HostKeys: []ssh.PublicKey{host.PublicKey()}, Hosts: "git.example.com"},
	}, Logger: slog.New(slog.NewTextHandler(&logs, nil)), Secrets: scrub.NewSet([]scrub.Secret{{Name: "TOKEN", Value: token}})})
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("unix", serve(t, a))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cl := agent.NewClient(c)
	for _, name := range []string{token + "@x", strings.ToLower(token), token[:12] + "." + token[12:]} {
		if _, err := cl.Extension(name, nil); err == nil {
			t.Fatalf("extension %q accepted", name)
		}
	}
	rep := a.Report()
	if len(rep.Refused) != 3 {
		t.Fatalf("refusals: %q", rep.Refused)
	}
	cn := canary.New(t)
	cn.AddString("TOKEN", token)
	cn.CheckText("the agent's refusals", cmdtext.Strings(rep.Refused)...)
	cn.CheckText("the agent's log", logs.String())
}
