//go:build !((dragonfly && cgo) || (freebsd && cgo) || linux || netbsd || openbsd)

// macOS (go-keyring runs /usr/bin/security), Windows and the platforms
// go-keyring does not support.

package keystore

import (
	"errors"
	"fmt"
	"os/exec"

	"github.com/zalando/go-keyring"
)

// A fetch that outlives its context: on macOS `security` waits while the
// Keychain shows a dialog (to unlock it, or to allow coily access to the
// item), so a call that does not answer is most likely a locked keychain.
var errKeychainTimeout = ErrLocked

const keychainTimeoutHint = "the keychain did not answer (is it locked, or waiting for you to allow access?): unlock it on the host and retry"

// keychainReady is Keychain.Check's question; the macOS Keychain cannot
// be asked anything without a possible dialog, so it is taken as ready
// and a locked keychain shows at the first fetch.
func keychainReady() error { return nil }

func keychainGet(service, account string) (string, error) {
	return keyring.Get(service, account)
}

// platformKeychainError maps the errors of the `security` command. Other
// errors (decoding the stored value) may quote it and are not repeated.
func platformKeychainError(err error) error {
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		return fmt.Errorf("%w: the keychain query failed (security: %v)", ErrUnreachable, ee)
	case errors.Is(err, exec.ErrNotFound):
		return fmt.Errorf("%w: no keychain tool on this host", ErrUnreachable)
	default:
		return fmt.Errorf("%w: the keychain query failed (%T)", ErrUnreachable, err)
	}
}
