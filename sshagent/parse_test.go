package sshagent_test

import (
	"bytes"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"regexp"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"

	"coily.dev/coily/sshagent"
)

// sessionBindCases are session-bind bodies, good and hostile; err is part
// of the parse error, or verify part of the verification error.
func sessionBindCases(t testing.TB) []struct {
	name        string
	body        []byte
	err, verify string
	fwd         bool
} {
	host, other := newSigner(t), newSigner(t)
	sid := sessionID(t)
	good := bindBody(t, host, sid, false)
	hostBlob := host.PublicKey().Marshal()
	sig, _ := host.Sign(rand.Reader, sid)
	sigBlob := ssh.Marshal(sig)
	cert := &ssh.Certificate{Key: host.PublicKey(), CertType: ssh.HostCert, ValidPrincipals: []string{"git.example.com"}, ValidBefore: ssh.CertTimeInfinity}
	if err := cert.SignCert(rand.Reader, other); err != nil {
		t.Fatal(err)
	}
	return []struct {
		name        string
		body        []byte
		err, verify string
		fwd         bool
	}{
		{name: "good", body: good},
		{name: "forwarding", body: bindBody(t, host, sid, true), fwd: true},
		{name: "signed by another key", body: wire(nil).str(hostBlob).str(sid).str(ssh.Marshal(mustSign(t, other, sid))).b(0), verify: "does not verify"},
		{name: "signature over another session", body: wire(nil).str(hostBlob).str(sid).str(ssh.Marshal(mustSign(t, host, sessionID(t)))).b(0), verify: "does not verify"},
		{name: "empty", body: nil, err: "malformed"},
		{name: "truncated", body: good[:len(good)-1], err: "malformed"},
		{name: "trailing byte", body: append(bytes.Clone(good), 0), err: "malformed"},
		{name: "forwarding flag 2", body: append(bytes.Clone(good[:len(good)-1]), 2), err: "malformed"},
		{name: "length past the end", body: wire(nil).u32(1 << 30), err: "malformed"},
		{name: "host key garbage", body: wire(nil).str([]byte("ssh-ed25519")).str(sid).str(sigBlob).b(0), err: "host key: does not parse"},
		{name: "host key with trailing bytes", body: wire(nil).str(append(bytes.Clone(hostBlob), 0)).str(sid).str(sigBlob).b(0), err: "host key"},
		{name: "host certificate", body: wire(nil).str(cert.Marshal()).str(sid).str(sigBlob).b(0), err: "a certificate"},
		{name: "short session id", body: wire(nil).str(hostBlob).str(sid[:15]).str(sigBlob).b(0), err: "session id of 15 bytes"},
		{name: "long session id", body: wire(nil).str(hostBlob).str(bytes.Repeat(sid, 3)).str(sigBlob).b(0), err: "session id of 96 bytes"},
		{name: "empty signature", body: wire(nil).str(hostBlob).str(sid).str(nil).b(0), err: "signature does not parse"},
		{name: "signature without blob", body: wire(nil).str(hostBlob).str(sid).str(wire(nil).strs("ssh-ed25519", "")).b(0), err: "signature does not parse"},
		{name: "signature of another algorithm", body: wire(nil).str(hostBlob).str(sid).str(wire(nil).strs("ssh-rsa").str(sig.Blob)).b(0), verify: "SHA-1"},
	}
}

func mustSign(t testing.TB, s ssh.Signer, data []byte) *ssh.Signature {
	t.Helper()
	sig, err := s.Sign(rand.Reader, data)
	if err != nil {
		t.Fatal(err)
	}
	return sig
}

func TestParseSessionBind(t *testing.T) {
	for _, c := range sessionBindCases(t) {
		b, err := sshagent.ParseSessionBind(c.body)
		switch {
		case c.err != "":
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s: error %v, want %q", c.name, err, c.err)
			}
			continue
		case err != nil:
			t.Errorf("%s: %v", c.name, err)
			continue
		case b.Forwarding != c.fwd:
			t.Errorf("%s: forwarding %v", c.name, b.Forwarding)
		}
		if err := b.Verify(); c.verify == "" && err != nil || c.verify != "" && (err == nil || !strings.Contains(err.Error(), c.verify)) {
			t.Errorf("%s: Verify() = %v, want %q", c.name, err, c.verify)
		}
	}
}

// An RSA host key's rsa-sha2-256 signature verifies; its ssh-rsa (SHA-1)
// one is refused.
func TestSessionBindRSAHostKey(t *testing.T) {
	priv, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	host, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	sid := sessionID(t)
	for alg, ok := range map[string]bool{ssh.KeyAlgoRSASHA256: true, ssh.KeyAlgoRSASHA512: true, ssh.KeyAlgoRSA: false} {
		sig, err := host.(ssh.AlgorithmSigner).SignWithAlgorithm(rand.Reader, sid, alg)
		if err != nil {
			t.Fatal(err)
		}
		b, err := sshagent.ParseSessionBind(wire(nil).str(host.PublicKey().Marshal()).str(sid).str(ssh.Marshal(sig)).b(0))
		if err != nil {
			t.Fatalf("%s: %v", alg, err)
		}
		if err := b.Verify(); (err == nil) != ok {
			t.Errorf("%s: Verify() = %v", alg, err)
		}
	}
}

// userauthCases are sign request data, good and hostile.
func userauthCases(t testing.TB) []struct {
	name string
	data []byte
	err  string
} {
	key, host := newSigner(t).PublicKey(), newSigner(t).PublicKey()
	sid := sessionID(t)
	kb, hb := key.Marshal(), host.Marshal()
	head := func(method string) wire {
		return wire(nil).str(sid).b(50).strs("git", "ssh-connection", method).b(1).strs("ssh-ed25519").str(kb)
	}
	return []struct {
		name string
		data []byte
		err  string
	}{
		{name: "publickey", data: userauth(sid, key, "ssh-ed25519", nil)},
		{name: "hostbound", data: userauth(sid, key, "ssh-ed25519", host)},
		{name: "empty", data: nil, err: "malformed"},
		{name: "arbitrary data", data: []byte("tree 4b825dc642cb6eb9a060e54bf8d69288fbee4904\nauthor a <a@example.com> 0 +0000\n"), err: "malformed"},
		{name: "ssh-keygen -Y signature blob", data: wire([]byte("SSHSIG")).strs("git", "", "sha512").str(make([]byte, 64)), err: "malformed"},
		{name: "hostbound without host key", data: head("publickey-hostbound-v00@openssh.com"), err: "malformed"},
		{name: "publickey with a host key", data: head("publickey").str(hb), err: "malformed"},
		{name: "trailing byte", data: append(userauth(sid, key, "ssh-ed25519", nil), 0), err: "malformed"},
		{name: "truncated", data: userauth(sid, key, "ssh-ed25519", nil)[:40], err: "malformed"},
		{name: "message 51", data: wire(nil).str(sid).b(51).strs("git", "ssh-connection", "publickey").b(1).strs("ssh-ed25519").str(kb), err: "message 51"},
		{name: "no signature follows", data: wire(nil).str(sid).b(50).strs("git", "ssh-connection", "publickey").b(0).strs("ssh-ed25519").str(kb), err: "no signature"},
		{name: "boolean 2", data: wire(nil).str(sid).b(50).strs("git", "ssh-connection", "publickey").b(2).strs("ssh-ed25519").str(kb), err: "malformed"},
		{name: "service", data: wire(nil).str(sid).b(50).strs("git", "ssh-userauth", "publickey").b(1).strs("ssh-ed25519").str(kb), err: "service"},
		{name: "method password", data: wire(nil).str(sid).b(50).strs("git", "ssh-connection", "password").b(1).strs("ssh-ed25519").str(kb), err: "method"},
		{name: "hostbound of another version", data: wire(nil).str(sid).b(50).strs("git", "ssh-connection", "publickey-hostbound-v01@openssh.com").b(1).strs("ssh-ed25519").str(kb), err: "method"},
		{name: "empty user", data: wire(nil).str(sid).b(50).strs("", "ssh-connection", "publickey").b(1).strs("ssh-ed25519").str(kb), err: "user name"},
		{name: "NUL in user", data: wire(nil).str(sid).b(50).strs("git\x00root", "ssh-connection", "publickey").b(1).strs("ssh-ed25519").str(kb), err: "user name"},
		{name: "invalid UTF-8 user", data: wire(nil).str(sid).b(50).strs("g\xffit", "ssh-connection", "publickey").b(1).strs("ssh-ed25519").str(kb), err: "user name"},
		{name: "long user", data: wire(nil).str(sid).b(50).strs(strings.Repeat("u", 257), "ssh-connection", "publickey").b(1).strs("ssh-ed25519").str(kb), err: "user name"},
		{name: "empty algorithm", data: wire(nil).str(sid).b(50).strs("git", "ssh-connection", "publickey").b(1).strs("").str(kb), err: "algorithm"},
		{name: "empty key", data: wire(nil).str(sid).b(50).strs("git", "ssh-connection", "publickey").b(1).strs("ssh-ed25519").str(nil), err: "key"},
		{name: "short session id", data: wire(nil).str(sid[:8]).b(50).strs("git", "ssh-connection", "publickey").b(1).strs("ssh-ed25519").str(kb), err: "session id"},
	}
}

func TestParseUserauthRequest(t *testing.T) {
	for _, c := range userauthCases(t) {
		u, err := sshagent.ParseUserauthRequest(c.data)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s: error %v, want %q", c.name, err, c.err)
			}
			continue
		}
		if err != nil || u.User != "git" || u.Algorithm != "ssh-ed25519" || len(u.SessionID) != 32 || len(u.Key) == 0 ||
			(u.Method == sshagent.MethodPublicKeyHostbound) != (len(u.HostKey) > 0) {
			t.Errorf("%s: %+v, %v", c.name, u, err)
		}
	}
}

// privateKeyCases are stored private keys, good and hostile; err is part
// of the error.
func privateKeyCases(t testing.TB) (cases []struct{ name, value, err string }, secret string) {
	signer := newSigner(t)
	_ = signer
	_, priv := mustEd25519(t)
	block, err := ssh.MarshalPrivateKey(priv, "")
	if err != nil {
		t.Fatal(err)
	}
	pemText := string(pemEncode(block))
	enc, err := ssh.MarshalPrivateKeyWithPassphrase(priv, "", []byte("pass"))
	if err != nil {
		t.Fatal(err)
	}
	small, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	smallBlock, err := ssh.MarshalPrivateKey(small, "")
	if err != nil {
		t.Fatal(err)
	}
	body := strings.Split(pemText, "\n")[1] // a line of the key's base64
	b64 := base64.StdEncoding.EncodeToString([]byte(pemText))
	return []struct{ name, value, err string }{
		{name: "OpenSSH file", value: pemText},
		{name: "with blank lines around", value: "\n\n" + pemText + "\n  \n"},
		{name: "CRLF", value: strings.ReplaceAll(pemText, "\n", "\r\n")},
		{name: "base64 on one line", value: b64},
		{name: "base64 with a newline", value: b64 + "\n"},
		{name: "empty", value: "", err: "not a private key"},
		{name: "base64 cut", value: b64[:len(b64)-1], err: "not a private key"},
		{name: "base64 with a space", value: b64[:8] + " " + b64[8:], err: "not a private key"},
		{name: "base64 of something else", value: base64.StdEncoding.EncodeToString([]byte("hello")), err: "not a private key"},
		{name: "body only", value: body, err: "not a private key"},
		{name: "public key", value: string(ssh.MarshalAuthorizedKey(signer.PublicKey())), err: "not a private key"},
		{name: "truncated", value: pemText[:len(pemText)/2], err: "does not parse"},
		{name: "encrypted", value: string(pemEncode(enc)), err: "passphrase"},
		{name: "RSA 1024", value: string(pemEncode(smallBlock)), err: "1024 bits"},
		{name: "huge", value: "-----BEGIN " + strings.Repeat("A", 40<<10), err: "longer than"},
	}, body
}

func TestParsePrivateKey(t *testing.T) {
	cases, secret := privateKeyCases(t)
	for _, c := range cases {
		s, err := sshagent.ParsePrivateKey(c.value)
		if c.err == "" {
			if err != nil || s.PublicKey().Type() != ssh.KeyAlgoED25519 {
				t.Errorf("%s: %v", c.name, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), c.err) {
			t.Errorf("%s: error %v, want %q", c.name, err, c.err)
		}
		if err != nil && strings.Contains(err.Error(), secret[:16]) {
			t.Errorf("%s: the error quotes the key", c.name)
		}
	}
}

// FuzzParseSessionBind: never panics; what parses is canonical (written
// back, it is the input).
func FuzzParseSessionBind(f *testing.F) {
	for _, c := range sessionBindCases(f) {
		f.Add(c.body)
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		b, err := sshagent.ParseSessionBind(body)
		if err != nil {
			return
		}
		fwd := byte(0)
		if b.Forwarding {
			fwd = 1
		}
		again := wire(nil).str(b.HostKey.Marshal()).str(b.SessionID).str(ssh.Marshal(b.Signature)).b(fwd)
		if !bytes.Equal(again, body) {
			t.Fatalf("parsed %x, writes back %x", body, again)
		}
		_ = b.Verify()
	})
}

// FuzzParseUserauthRequest: never panics; what parses is canonical.
func FuzzParseUserauthRequest(f *testing.F) {
	for _, c := range userauthCases(f) {
		f.Add(c.data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		u, err := sshagent.ParseUserauthRequest(data)
		if err != nil {
			return
		}
		again := wire(nil).str(u.SessionID).b(50).strs(u.User, "ssh-connection", u.Method).b(1).strs(u.Algorithm).str(u.Key)
		if u.Method == sshagent.MethodPublicKeyHostbound {
			again = again.str(u.HostKey)
		}
		if !bytes.Equal(again, data) {
			t.Fatalf("parsed %x, writes back %x", data, again)
		}
	})
}

// privateKeyErrors are the errors ParsePrivateKey may return: fixed
// texts with numbers and type names, nothing of the input.
var privateKeyErrors = regexp.MustCompile(`^(the private key is longer than [0-9]+ bytes|` +
	`not a private key: want the file ssh-keygen writes \(-----BEGIN OPENSSH PRIVATE KEY-----\), or that file in base64 on one line|` +
	`the private key is encrypted with a passphrase: store it without one \(ssh-keygen -p -N ''\)|` +
	`the private key does not parse \(an OpenSSH or PEM private key is expected\)|` +
	`the RSA key has [0-9]+ bits, fewer than 2048|` +
	`a \*?[a-z0-9]+\.PrivateKey private key: want Ed25519, ECDSA or RSA)$`)

// FuzzParsePrivateKey: never panics; an error is one of the fixed texts,
// never quoting the input.
func FuzzParsePrivateKey(f *testing.F) {
	cases, _ := privateKeyCases(f)
	for _, c := range cases {
		f.Add(c.value)
	}
	f.Fuzz(func(t *testing.T, value string) {
		_, err := sshagent.ParsePrivateKey(value)
		if err != nil && !privateKeyErrors.MatchString(err.Error()) {
			t.Fatalf("error %q is not one of the fixed texts", err)
		}
	})
}
