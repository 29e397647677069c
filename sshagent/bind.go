package sshagent

import (
	"bytes"
	"errors"
	"fmt"
	"strings"

	"golang.org/x/crypto/ssh"
)

// SessionBindExtension is the extension by which ssh (OpenSSH 8.9 and
// later) binds an agent connection to the session it authenticates.
const SessionBindExtension = "session-bind@openssh.com"

// Bounds of a session id: the exchange hash of the session's first key
// exchange, the output of its hash (SHA-1 to SHA-512).
const (
	minSessionID = 16
	maxSessionID = 64
)

// SessionBind is the body of a session-bind@openssh.com request: the
// server's host key, the session id, the host key's signature over the
// session id from the key exchange, and whether the binding is for an
// agent forwarded to that host.
type SessionBind struct {
	HostKey    ssh.PublicKey
	SessionID  []byte
	Signature  *ssh.Signature
	Forwarding bool
}

// ParseSessionBind reads the body of a session-bind@openssh.com request
// (what follows the extension's name) strictly: string hostkey, string
// session id, string signature, boolean forwarding, nothing after. The
// host key is a plain key (no certificate) in its canonical encoding;
// the signature is one ssh signature in its canonical encoding. It does
// not verify the signature: Verify does.
func ParseSessionBind(body []byte) (SessionBind, error) {
	r := reader{b: body}
	keyBlob, sid, sigBlob, fwd := r.string(), r.string(), r.string(), r.bool()
	if !r.end() {
		return SessionBind{}, fmt.Errorf("session bind: %w", errMalformed)
	}
	key, err := parsePlainKey(keyBlob)
	if err != nil {
		return SessionBind{}, fmt.Errorf("session bind: host key: %w", err)
	}
	if len(sid) < minSessionID || len(sid) > maxSessionID {
		return SessionBind{}, fmt.Errorf("session bind: session id of %d bytes, want %d to %d", len(sid), minSessionID, maxSessionID)
	}
	sig, err := parseSignature(sigBlob)
	if err != nil {
		return SessionBind{}, fmt.Errorf("session bind: %w", err)
	}
	return SessionBind{HostKey: key, SessionID: bytes.Clone(sid), Signature: sig, Forwarding: fwd}, nil
}

// Verify checks the host key's signature over the session id. SHA-1
// signatures (ssh-rsa) are refused: OpenSSH has not made them by default
// since 8.8.
func (b SessionBind) Verify() error {
	if b.Signature.Format == ssh.KeyAlgoRSA {
		return errors.New("session bind: an ssh-rsa (SHA-1) host signature")
	}
	if err := b.HostKey.Verify(b.SessionID, b.Signature); err != nil {
		return errors.New("session bind: the host key's signature over the session id does not verify")
	}
	return nil
}

// parsePlainKey parses a public key blob in its canonical encoding; a
// certificate is refused (pins are plain keys).
func parsePlainKey(blob []byte) (ssh.PublicKey, error) {
	key, err := ssh.ParsePublicKey(blob)
	switch {
	case err != nil:
		return nil, errors.New("does not parse")
	case strings.Contains(key.Type(), "-cert-"):
		return nil, errors.New("a certificate, not a plain key")
	case !bytes.Equal(key.Marshal(), blob):
		return nil, errors.New("not in its canonical encoding")
	}
	return key, nil
}

// parseSignature parses an ssh signature blob in its canonical encoding.
func parseSignature(blob []byte) (*ssh.Signature, error) {
	var sig ssh.Signature
	if err := ssh.Unmarshal(blob, &sig); err != nil || sig.Format == "" || len(sig.Blob) == 0 {
		return nil, errors.New("the signature does not parse")
	}
	if !bytes.Equal(ssh.Marshal(&sig), blob) {
		return nil, errors.New("the signature is not in its canonical encoding")
	}
	return &sig, nil
}
