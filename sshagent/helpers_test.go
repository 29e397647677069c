package sshagent_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/binary"
	"encoding/pem"
	"os"
	"testing"

	"golang.org/x/crypto/ssh"
)

// wire builds ssh wire data.
type wire []byte

func (w wire) str(s []byte) wire {
	return append(binary.BigEndian.AppendUint32(w, uint32(len(s))), s...)
}
func (w wire) b(c ...byte) wire  { return append(w, c...) }
func (w wire) u32(v uint32) wire { return binary.BigEndian.AppendUint32(w, v) }
func (w wire) strs(ss ...string) wire {
	for _, s := range ss {
		w = w.str([]byte(s))
	}
	return w
}

// newSigner makes a fresh Ed25519 signer.
func newSigner(t testing.TB) ssh.Signer {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	s, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// sessionID makes a random 32-byte session id.
func sessionID(t testing.TB) []byte {
	t.Helper()
	sid := make([]byte, 32)
	if _, err := rand.Read(sid); err != nil {
		t.Fatal(err)
	}
	return sid
}

// bindBody is a session-bind body: host's key, sid, host's signature over
// sid, and the forwarding flag.
func bindBody(t testing.TB, host ssh.Signer, sid []byte, fwd bool) []byte {
	t.Helper()
	sig, err := host.Sign(rand.Reader, sid)
	if err != nil {
		t.Fatal(err)
	}
	f := byte(0)
	if fwd {
		f = 1
	}
	return wire(nil).str(host.PublicKey().Marshal()).str(sid).str(ssh.Marshal(sig)).b(f)
}

// userauth is the data ssh signs to authenticate as user with key in the
// session sid; with a host key, by the hostbound method.
func userauth(sid []byte, key ssh.PublicKey, alg string, hostKey ssh.PublicKey) []byte {
	method := "publickey"
	if hostKey != nil {
		method = "publickey-hostbound-v00@openssh.com"
	}
	w := wire(nil).str(sid).b(50).strs("git", "ssh-connection", method).b(1).strs(alg).str(key.Marshal())
	if hostKey != nil {
		w = w.str(hostKey.Marshal())
	}
	return w
}

func mustEd25519(t testing.TB) (ed25519.PublicKey, ed25519.PrivateKey) {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return pub, priv
}

func pemEncode(b *pem.Block) []byte { return pem.EncodeToMemory(b) }

// shortTemp is a directory with a short path (a unix socket path is at
// most 108 bytes), removed when the test ends.
func shortTemp(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "coily-agent-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}
