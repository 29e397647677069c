// Package keystore fetches credentials by reference for the commands coily
// runs.
//
// A reference names a backend and a secret in it:
//
//	vault:secret/coily/github#token   field "token" of the KV secret at secret/coily/github
//	keychain:coily/github             service "coily", account "github" in the OS keychain
//	file:github                       the line "github=..." of the credentials file
//
// A Keystore holds the configured backends and a short cache of fetched
// values; Lockout drops the cache. References to one secret of a backend
// that reads several fields at once (GroupBackend: Vault) are fetched with
// one read. A read that carries a lease (a dynamic secret, such as
// vault:aws/sts/<role>#access_key) is never cached: its lease goes to the
// caller, which revokes it when done (RevokeLease). Values are returned
// only to the caller that injects them into a sandboxed child: no error,
// log line or String method of this package ever contains one; lease ids
// are not secrets.
//
// Memory: dropping a value (at the end of its cache TTL, at Lockout, after
// a failed fetch) removes this package's references to it, and the byte
// buffers it reads secrets into (a credentials file, a token file) are
// cleared once parsed. That is a best effort, not a guarantee: Go strings
// cannot be overwritten, values are copied (string conversions, maps, the
// backends' HTTP and JSON decoding, the child's environment), and the
// garbage collector frees memory without wiping it. A value may stay
// readable in the server's memory, or a dump of it, after it is dropped.
package keystore

import (
	"context"
	"errors"
	"fmt"

	"coily.dev/coily/keystore/credref"
)

// Backend names.
const (
	BackendVault    = credref.Vault
	BackendKeychain = credref.Keychain
	BackendFile     = credref.File
)

// A Backend fetches one secret value by reference.
type Backend interface {
	// Fetch returns the value ref names. Errors must name the reference,
	// never a value, and should wrap one of ErrNotFound, ErrDenied,
	// ErrUnreachable or ErrRenewal.
	Fetch(ctx context.Context, ref Ref) (string, error)
}

// Errors a backend's failures wrap, for callers and tests to tell them
// apart. Every one of them reaches an Exec caller as credential-unavailable.
var (
	ErrNotFound    = errors.New("secret not found")
	ErrDenied      = errors.New("permission denied")
	ErrUnreachable = errors.New("backend unreachable")
	ErrRenewal     = errors.New("token renewal failed")
	ErrLocked      = errors.New("keychain locked")
	ErrNoBackend   = errors.New("backend not configured")
)

// Error is a failure to fetch one reference. Its message names the
// reference and what went wrong, never a value.
type Error struct {
	Ref Ref
	Err error
}

func (e *Error) Error() string { return fmt.Sprintf("credential %s: %v", e.Ref, e.Err) }
func (e *Error) Unwrap() error { return e.Err }
