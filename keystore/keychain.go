package keystore

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/zalando/go-keyring"
)

// Keychain reads secrets from the OS keychain: the macOS Keychain, or the
// freedesktop Secret Service on Linux, through github.com/zalando/go-keyring.
// A reference's Path is the service and its Field the account
// (keychain:coily/github is service "coily", account "github").
//
// The keychain is never unlocked interactively. On Linux a locked login
// collection is reported as ErrLocked before anything is asked of it, and
// there must be a session bus (DBUS_SESSION_BUS_ADDRESS or
// /run/user/UID/bus): without one the fetch fails with ErrUnreachable
// instead of letting the D-Bus library autolaunch a bus.
//
// The library's calls take no context and may block: on a prompt the
// keychain shows (with gnome-keyring, go-keyring's Get of a locked
// collection waits for the unlock prompt; with no prompter it fails at
// once, with one that no one answers it waits 25 s, gnome-keyring's D-Bus
// timeout), or on a Secret Service that does not answer. Fetch runs the
// call in a goroutine and returns when ctx ends; the blocked call is then
// abandoned, left to finish on its own (on macOS the `security` process
// keeps running until it does). There is at most one call in flight per
// reference: a Fetch of a reference whose call is still in flight waits
// for that call's answer instead of starting another, so abandoned calls
// do not pile up, and concurrent fetches share one answer.
type Keychain struct {
	// get is the blocking lookup (keychainGet; tests replace it).
	get func(service, account string) (string, error)

	mu       sync.Mutex
	inflight map[Ref]*keychainCall
	checking *keychainCall // the readiness check in flight (Check)
}

// keychainCall is one lookup in flight; done is closed once value and
// err are set.
type keychainCall struct {
	done    chan struct{}
	value   string
	err     error
	fetches int // Fetch calls that joined it (under Keychain.mu)
}

// NewKeychain returns the OS keychain backend.
func NewKeychain() *Keychain {
	return &Keychain{get: keychainGet, inflight: map[Ref]*keychainCall{}}
}

// Fetch returns the password of the keychain item with service ref.Path
// and account ref.Field.
func (k *Keychain) Fetch(ctx context.Context, ref Ref) (string, error) {
	if ref.Path == "" || ref.Field == "" {
		return "", &Error{Ref: ref, Err: fmt.Errorf("%w: a keychain reference needs a service and an account", ErrNotFound)}
	}
	if err := ctx.Err(); err != nil {
		return "", &Error{Ref: ref, Err: fmt.Errorf("%w: %w", ErrUnreachable, err)}
	}
	k.mu.Lock()
	c := k.inflight[ref]
	if c == nil {
		c = &keychainCall{done: make(chan struct{})}
		k.inflight[ref] = c
		go k.run(ref, c)
	}
	c.fetches++
	k.mu.Unlock()
	select {
	case <-c.done:
	case <-ctx.Done():
		select {
		case <-c.done: // both ready: the answer wins
		default:
			return "", &Error{Ref: ref, Err: fmt.Errorf("%w: %s (%w)", errKeychainTimeout, keychainTimeoutHint, ctx.Err())}
		}
	}
	if c.err != nil {
		return "", &Error{Ref: ref, Err: c.err}
	}
	return c.value, nil
}

// run performs one lookup and publishes its outcome to everyone waiting
// on c (possibly no one, if they all gave up).
func (k *Keychain) run(ref Ref, c *keychainCall) {
	defer func() {
		// The library asserts types on D-Bus replies and dereferences
		// the signal it waits for, which is nil when the connection
		// closes: a panic here must not take the server down.
		if recover() != nil {
			c.value, c.err = "", fmt.Errorf("%w: the keychain library failed (panic)", ErrUnreachable)
		}
		k.mu.Lock()
		delete(k.inflight, ref)
		k.mu.Unlock()
		close(c.done)
	}()
	v, err := k.get(ref.Path, ref.Field)
	if err != nil {
		c.err = keychainError(err)
		return
	}
	c.value = v
}

// keychainError maps an error of the keychain library (or of the Linux
// pre-checks, which map their own) to one wrapping a package sentinel,
// without the library's text where it might quote stored data.
func keychainError(err error) error {
	switch {
	case errors.Is(err, ErrNotFound), errors.Is(err, ErrLocked), errors.Is(err, ErrUnreachable), errors.Is(err, ErrDenied):
		return err
	case errors.Is(err, keyring.ErrNotFound):
		return fmt.Errorf("%w: no such item in the OS keychain", ErrNotFound)
	case errors.Is(err, keyring.ErrUnsupportedPlatform):
		return fmt.Errorf("%w: no OS keychain on this platform", ErrUnreachable)
	}
	return platformKeychainError(err)
}

// Check reports whether the keychain would answer now without asking
// anyone (on Linux: a session bus, a Secret Service on it, its login
// collection unlocked; on macOS nothing can be asked without a prompt, so
// it passes). Like Fetch it returns when ctx ends, and at most one check
// is in flight.
func (k *Keychain) Check(ctx context.Context) error {
	k.mu.Lock()
	c := k.checking
	if c == nil {
		c = &keychainCall{done: make(chan struct{})}
		k.checking = c
		go k.runCheck(c)
	}
	k.mu.Unlock()
	select {
	case <-c.done:
		return c.err
	case <-ctx.Done():
		return fmt.Errorf("%w: %s (%w)", errKeychainTimeout, keychainTimeoutHint, ctx.Err())
	}
}

func (k *Keychain) runCheck(c *keychainCall) {
	defer func() {
		if recover() != nil {
			c.err = fmt.Errorf("%w: the keychain library failed (panic)", ErrUnreachable)
		}
		k.mu.Lock()
		k.checking = nil
		k.mu.Unlock()
		close(c.done)
	}()
	if err := keychainReady(); err != nil {
		c.err = keychainError(err)
	}
}
