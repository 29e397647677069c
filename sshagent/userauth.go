package sshagent

import (
	"bytes"
	"fmt"
	"unicode/utf8"
)

// The user authentication methods whose signature input the agent signs.
const (
	MethodPublicKey          = "publickey"
	MethodPublicKeyHostbound = "publickey-hostbound-v00@openssh.com"
)

// msgUserauthRequest is SSH_MSG_USERAUTH_REQUEST (RFC 4252).
const msgUserauthRequest = 50

// Bounds of the fields of a user authentication request.
const (
	maxUserName  = 256
	maxAlgorithm = 64
)

// UserauthRequest is what ssh asks an agent to sign to authenticate with
// a public key (RFC 4252 section 7; OpenSSH's PROTOCOL for the hostbound
// method, which adds the server's host key).
type UserauthRequest struct {
	SessionID []byte
	User      string
	Method    string
	Algorithm string
	// Key is the public key blob the request authenticates with.
	Key []byte
	// HostKey is the server's host key blob (hostbound method only).
	HostKey []byte
}

// ParseUserauthRequest reads the data of a sign request as a user
// authentication request, strictly: string session id (16 to 64 bytes),
// byte SSH_MSG_USERAUTH_REQUEST, string user (UTF-8, no NUL, at most 256
// bytes), string "ssh-connection", string method (publickey or
// publickey-hostbound-v00@openssh.com), boolean TRUE, string algorithm,
// string public key, with the hostbound method string host key; nothing
// after. Anything else is not signed.
func ParseUserauthRequest(data []byte) (UserauthRequest, error) {
	r := reader{b: data}
	var u UserauthRequest
	u.SessionID = r.string()
	kind := r.byte()
	user, service, method := r.string(), r.string(), r.string()
	withSig := r.bool()
	alg, key := r.string(), r.string()
	u.User, u.Method, u.Algorithm, u.Key = string(user), string(method), string(alg), key
	if u.Method == MethodPublicKeyHostbound {
		u.HostKey = r.string()
	}
	switch {
	case !r.end():
		return UserauthRequest{}, fmt.Errorf("user authentication request: %w", errMalformed)
	case len(u.SessionID) < minSessionID || len(u.SessionID) > maxSessionID:
		return UserauthRequest{}, fmt.Errorf("user authentication request: session id of %d bytes", len(u.SessionID))
	case kind != msgUserauthRequest:
		return UserauthRequest{}, fmt.Errorf("user authentication request: message %d, want %d", kind, msgUserauthRequest)
	case len(user) == 0 || len(user) > maxUserName || !utf8.Valid(user) || bytes.IndexByte(user, 0) >= 0:
		return UserauthRequest{}, fmt.Errorf("user authentication request: %w user name", errMalformed)
	case string(service) != "ssh-connection":
		return UserauthRequest{}, fmt.Errorf("user authentication request: %w service", errMalformed)
	case u.Method != MethodPublicKey && u.Method != MethodPublicKeyHostbound:
		return UserauthRequest{}, fmt.Errorf("user authentication request: %w method", errMalformed)
	case !withSig:
		return UserauthRequest{}, fmt.Errorf("user authentication request: no signature follows")
	case len(alg) == 0 || len(alg) > maxAlgorithm:
		return UserauthRequest{}, fmt.Errorf("user authentication request: %w algorithm", errMalformed)
	case len(key) == 0:
		return UserauthRequest{}, fmt.Errorf("user authentication request: %w key", errMalformed)
	case u.Method == MethodPublicKeyHostbound && len(u.HostKey) == 0:
		return UserauthRequest{}, fmt.Errorf("user authentication request: %w host key", errMalformed)
	}
	u.SessionID, u.Key, u.HostKey = bytes.Clone(u.SessionID), bytes.Clone(u.Key), bytes.Clone(u.HostKey)
	return u, nil
}
