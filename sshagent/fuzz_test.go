package sshagent

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"testing"

	"golang.org/x/crypto/ssh"
)

// Fixed keys for the fuzz target, so that seeds holding valid binds and
// requests stay valid from run to run.
var (
	fuzzKey      = ed25519.NewKeyFromSeed(bytes.Repeat([]byte{7}, ed25519.SeedSize))
	fuzzHost     = ed25519.NewKeyFromSeed(bytes.Repeat([]byte{9}, ed25519.SeedSize))
	fuzzStranger = ed25519.NewKeyFromSeed(bytes.Repeat([]byte{3}, ed25519.SeedSize))
	fuzzSID      = bytes.Repeat([]byte{0x5a}, 32)
)

func fuzzSigner(t testing.TB, k ed25519.PrivateKey) ssh.Signer {
	s, err := ssh.NewSignerFromKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func fuzzAgent(t testing.TB) *Agent {
	a, err := New(Config{Rule: "fuzz", Keys: []Key{{Name: "file:k", Signer: fuzzSigner(t, fuzzKey),
		HostKeys: []ssh.PublicKey{fuzzSigner(t, fuzzHost).PublicKey()}, Hosts: "h"}}})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// fuzzBindMsg is a session-bind request for sid signed by host.
func fuzzBindMsg(t testing.TB, host ed25519.PrivateKey, sid []byte, fwd byte) []byte {
	s := fuzzSigner(t, host)
	sig, err := s.Sign(rand.Reader, sid)
	if err != nil {
		t.Fatal(err)
	}
	msg := appendString([]byte{msgExtension}, []byte(SessionBindExtension))
	msg = appendString(appendString(appendString(msg, s.PublicKey().Marshal()), sid), ssh.Marshal(sig))
	return append(msg, fwd)
}

// fuzzSignMsg is a sign request with the fuzz key for a user
// authentication in session sid.
func fuzzSignMsg(t testing.TB, sid []byte, alg string, flags uint32) []byte {
	key := fuzzSigner(t, fuzzKey).PublicKey().Marshal()
	data := appendString(nil, sid)
	data = append(data, msgUserauthRequest)
	for _, s := range []string{"git", "ssh-connection", MethodPublicKey} {
		data = appendString(data, []byte(s))
	}
	data = appendString(appendString(append(data, 1), []byte(alg)), key)
	msg := appendString(appendString([]byte{msgSignRequest}, key), data)
	return append(msg, byte(flags>>24), byte(flags>>16), byte(flags>>8), byte(flags))
}

// stream frames messages as a connection carries them.
func stream(msgs ...[]byte) []byte {
	var out []byte
	for _, m := range msgs {
		out = append(out, frame(m)...)
	}
	return out
}

// FuzzAgentSession feeds a connection's byte stream to a session: it
// never panics, answers only with the four replies it knows, and signs
// only a user authentication request whose session id a bind it accepted
// named, never revealing the private key.
func FuzzAgentSession(f *testing.F) {
	f.Add(stream([]byte{msgRequestIdentities}))
	f.Add(stream(fuzzBindMsg(f, fuzzHost, fuzzSID, 0), fuzzSignMsg(f, fuzzSID, ssh.KeyAlgoED25519, 0)))
	f.Add(stream(fuzzSignMsg(f, fuzzSID, ssh.KeyAlgoED25519, 0)))
	f.Add(stream(fuzzBindMsg(f, fuzzStranger, fuzzSID, 0), fuzzSignMsg(f, fuzzSID, ssh.KeyAlgoED25519, 0)))
	f.Add(stream(fuzzBindMsg(f, fuzzHost, fuzzSID, 1), fuzzSignMsg(f, fuzzSID, ssh.KeyAlgoED25519, 0)))
	f.Add(stream(fuzzBindMsg(f, fuzzHost, fuzzSID, 0), fuzzSignMsg(f, bytes.Repeat([]byte{1}, 32), ssh.KeyAlgoED25519, 2)))
	f.Add(stream([]byte{17, 0, 0, 0, 11, 's', 's', 'h', '-', 'e', 'd', '2', '5', '5', '1', '9'}, []byte{19}, []byte{22, 0, 0, 0, 0}))
	f.Add(stream(appendString([]byte{msgExtension}, []byte("query"))))
	f.Add([]byte{0, 1, 0, 1, 11})
	f.Fuzz(func(t *testing.T, in []byte) {
		a := fuzzAgent(t)
		s := &session{a: a}
		bound := map[string]bool{}
		r := bytes.NewReader(in)
		for {
			msg, err := readMessage(r)
			if err != nil {
				return
			}
			reply := s.handle(msg)
			if len(reply) == 0 {
				t.Fatal("empty reply")
			}
			if bytes.Contains(reply, fuzzKey.Seed()) {
				t.Fatal("a reply holds the private key")
			}
			switch reply[0] {
			case msgFailure:
			case msgIdentitiesAnswer:
				if msg[0] != msgRequestIdentities {
					t.Fatalf("identities in answer to %d", msg[0])
				}
			case msgSuccess:
				b, err := ParseSessionBind(msg[5+len(SessionBindExtension):])
				if msg[0] != msgExtension || err != nil || b.Forwarding || b.Verify() != nil ||
					!bytes.Equal(b.HostKey.Marshal(), fuzzSigner(t, fuzzHost).PublicKey().Marshal()) {
					t.Fatalf("success for %x", msg)
				}
				bound[string(b.SessionID)] = true
			case msgSignResponse:
				rd := reader{b: msg[1:]}
				_, data, _ := rd.string(), rd.string(), rd.uint32()
				u, err := ParseUserauthRequest(data)
				if msg[0] != msgSignRequest || err != nil || !bound[string(u.SessionID)] {
					t.Fatalf("signed %x", msg)
				}
			default:
				t.Fatalf("reply %d to %x", reply[0], msg)
			}
		}
	})
}
