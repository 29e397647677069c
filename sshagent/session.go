package sshagent

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"slices"

	"golang.org/x/crypto/ssh"
)

// Flags of a sign request (draft-ietf-sshm-ssh-agent): which RSA
// signature algorithm to use.
const (
	flagRSASHA256 = 2
	flagRSASHA512 = 4
)

// session is one connection's state: the sessions bound on it, and why
// it may no longer sign, once a bind was refused.
type session struct {
	a        *Agent
	binds    []bound
	poisoned bool
}

// bound is one session bound on a connection.
type bound struct {
	hostKey ssh.PublicKey
	blob    []byte // hostKey's wire form
	id      []byte
}

// handle answers one request.
func (s *session) handle(msg []byte) []byte {
	switch msg[0] {
	case msgRequestIdentities:
		if len(msg) != 1 {
			s.a.refuse("refused a malformed request for its keys")
			return []byte{msgFailure}
		}
		return s.a.identities
	case msgSignRequest:
		return s.sign(msg[1:])
	case msgExtension:
		return s.extension(msg[1:])
	}
	if name, ok := requestNames[msg[0]]; ok {
		s.a.refuse("refused to " + name + ": it holds the rule's keys only, and only signs with them")
	} else {
		s.a.refuse(fmt.Sprintf("refused request type %d: it only lists its keys and signs", msg[0]))
	}
	return []byte{msgFailure}
}

// extension answers an extension request: session-bind@openssh.com, or
// failure for any other (as the protocol asks of an unsupported one).
func (s *session) extension(body []byte) []byte {
	r := reader{b: body}
	name := r.string()
	switch {
	case r.bad:
		s.a.refuse("refused a malformed extension request")
		return []byte{msgFailure}
	case string(name) != SessionBindExtension:
		s.a.refuse("refused extension " + extensionName(name) + ": it supports " + SessionBindExtension + " only")
		return []byte{msgFailure}
	}
	if err := s.bind(r.b); err != nil {
		s.poisoned = true
		s.a.refuse(err.Error() + "; it signs nothing more on that connection")
		return []byte{msgFailure}
	}
	return []byte{msgSuccess}
}

// bind checks and records a session bind; an error is a sentence.
func (s *session) bind(body []byte) error {
	if s.poisoned {
		return fmt.Errorf("refused a session bind on a connection where one was refused")
	}
	b, err := ParseSessionBind(body)
	switch {
	case err != nil:
		return fmt.Errorf("refused a %w", err)
	case b.Forwarding:
		return fmt.Errorf("refused a session bind for a forwarded agent: agent forwarding is not offered")
	case len(s.binds) >= maxBinds:
		return fmt.Errorf("refused a session bind: %d sessions are bound on the connection already", maxBinds)
	}
	if err := b.Verify(); err != nil {
		return fmt.Errorf("refused a %w", err)
	}
	blob := b.HostKey.Marshal()
	if !s.a.hostKeys[string(blob)] {
		return fmt.Errorf("refused the session with host key %s%s: the rule pins it for no host of its ssh_keys",
			ssh.FingerprintSHA256(b.HostKey), s.a.pinned(b.HostKey))
	}
	s.binds = append(s.binds, bound{hostKey: b.HostKey, blob: blob, id: b.SessionID})
	return nil
}

// sign answers a sign request: a signature, or failure and a refusal.
func (s *session) sign(body []byte) []byte {
	sig, err := s.signature(body)
	if err != nil {
		s.a.refuse(err.Error())
		return []byte{msgFailure}
	}
	return appendString([]byte{msgSignResponse}, ssh.Marshal(sig))
}

// signature checks a sign request and signs it; an error is a sentence.
func (s *session) signature(body []byte) (*ssh.Signature, error) {
	r := reader{b: body}
	keyBlob, data, flags := r.string(), r.string(), r.uint32()
	if !r.end() {
		return nil, fmt.Errorf("refused a malformed sign request")
	}
	i := slices.IndexFunc(s.a.blobs, func(b []byte) bool { return bytes.Equal(b, keyBlob) })
	if i < 0 {
		return nil, fmt.Errorf("refused to sign with a key it does not hold")
	}
	k := s.a.cfg.Keys[i]
	switch {
	case s.poisoned:
		return nil, fmt.Errorf("refused to sign with key %s: a session bind was refused on its connection", k.Name)
	case len(s.binds) == 0:
		return nil, fmt.Errorf("refused to sign with key %s: no session is bound to the connection (ssh binds one before it authenticates, from OpenSSH 8.9 on)", k.Name)
	}
	u, err := ParseUserauthRequest(data)
	if err != nil {
		return nil, fmt.Errorf("refused to sign with key %s what is not an ssh user authentication request", k.Name)
	}
	last := s.binds[len(s.binds)-1]
	alg, err := signAlgorithm(k.Signer.PublicKey().Type(), u.Algorithm, flags)
	switch {
	case !bytes.Equal(u.SessionID, last.id):
		return nil, fmt.Errorf("refused to sign with key %s for a session other than the one bound to the connection", k.Name)
	case !bytes.Equal(u.Key, keyBlob):
		return nil, fmt.Errorf("refused to sign with key %s a request naming another key", k.Name)
	case err != nil:
		return nil, fmt.Errorf("refused to sign with key %s: %v", k.Name, err)
	case u.Method == MethodPublicKeyHostbound && !bytes.Equal(u.HostKey, last.blob):
		return nil, fmt.Errorf("refused to sign with key %s a request naming another host key than the bound session's", k.Name)
	case !slices.ContainsFunc(k.HostKeys, func(h ssh.PublicKey) bool { return bytes.Equal(h.Marshal(), last.blob) }):
		return nil, fmt.Errorf("refused to sign with key %s for the session with host key %s%s: the rule gives this key for %s only",
			k.Name, ssh.FingerprintSHA256(last.hostKey), s.a.pinned(last.hostKey), k.Hosts)
	}
	as, ok := k.Signer.(ssh.AlgorithmSigner)
	if !ok {
		return nil, fmt.Errorf("refused to sign with key %s: its signer cannot choose an algorithm", k.Name)
	}
	if !s.a.reserve() {
		return nil, fmt.Errorf("refused to sign with key %s: the agent made its %d signatures for this exec already", k.Name, s.a.cfg.MaxSignatures)
	}
	sig, err := as.SignWithAlgorithm(rand.Reader, data, alg)
	if err != nil {
		s.a.unreserve()
		return nil, fmt.Errorf("could not sign with key %s", k.Name)
	}
	s.a.signed(i, last.hostKey)
	return sig, nil
}

// signAlgorithm is the signature algorithm for a key of keyType, given
// the request's algorithm and flags, which must agree: an RSA key signs
// with rsa-sha2-256 or rsa-sha2-512 (never SHA-1), any other key with its
// own algorithm and no flags.
func signAlgorithm(keyType, alg string, flags uint32) (string, error) {
	if keyType == ssh.KeyAlgoRSA {
		switch {
		case alg == ssh.KeyAlgoRSASHA256 && flags == flagRSASHA256, alg == ssh.KeyAlgoRSASHA512 && flags == flagRSASHA512:
			return alg, nil
		}
		return "", fmt.Errorf("an RSA key signs with rsa-sha2-256 or rsa-sha2-512 and the matching flag, not %s (flags %d)", extensionName([]byte(alg)), flags)
	}
	if alg != keyType || flags != 0 {
		return "", fmt.Errorf("a %s key signs with %s and no flags, not %s (flags %d)", keyType, keyType, extensionName([]byte(alg)), flags)
	}
	return alg, nil
}

// extensionName quotes a name from the sandbox when it is short printable
// ASCII, and says "an unnamed one" otherwise: what a refusal may repeat
// of it.
func extensionName(name []byte) string {
	if len(name) == 0 || len(name) > 64 {
		return "(a name of " + fmt.Sprint(len(name)) + " bytes)"
	}
	for _, c := range name {
		if c <= ' ' || c > '~' || c == '"' || c == '\\' {
			return "(a name of " + fmt.Sprint(len(name)) + " bytes)"
		}
	}
	return `"` + string(name) + `"`
}
