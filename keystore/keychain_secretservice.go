//go:build (dragonfly && cgo) || (freebsd && cgo) || linux || netbsd || openbsd

// The platforms where go-keyring uses the freedesktop Secret Service
// (its keyring_unix.go has the same constraint).

package keystore

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/godbus/dbus/v5"
	"github.com/zalando/go-keyring"
)

// A fetch that outlives its context: a locked collection is caught
// before the call (secretServiceReady), so a call that does not answer
// is a Secret Service that does not answer (or, rarely, a prompt after a
// lock that raced the check).
var errKeychainTimeout = ErrUnreachable

const keychainTimeoutHint = "the Secret Service did not answer (is the keyring daemon hung, or showing an unlock prompt?)"

const (
	secretService       = "org.freedesktop.secrets"
	secretServicePath   = "/org/freedesktop/secrets"
	secretCollections   = "org.freedesktop.Secret.Service.Collections"
	secretLocked        = "org.freedesktop.Secret.Collection.Locked"
	loginCollectionPath = "/org/freedesktop/secrets/collection/login"
	defaultAliasPath    = "/org/freedesktop/secrets/aliases/default"
)

// keychainGet checks that the Secret Service is there and its login
// collection unlocked, then asks go-keyring, whose Get would otherwise
// start an interactive unlock (with gnome-keyring and no prompter it
// fails at once with "failed to unlock correct collection"; with a
// prompter it waits for the user).
func keychainGet(service, account string) (string, error) {
	if err := secretServiceReady(); err != nil {
		return "", err
	}
	return keyring.Get(service, account)
}

// keychainReady is Keychain.Check's question: is the Secret Service
// there, its collection unlocked?
func keychainReady() error { return secretServiceReady() }

// secretServiceReady reports ErrUnreachable when there is no session bus
// or no Secret Service on it, ErrLocked when the collection go-keyring
// reads (the "login" collection, else the default alias, as its
// GetLoginCollection decides) is locked.
func secretServiceReady() error {
	if !sessionBusKnown() {
		return fmt.Errorf("%w: no D-Bus session bus (DBUS_SESSION_BUS_ADDRESS is unset): keychain references need the Secret Service of a desktop session", ErrUnreachable)
	}
	// The connection go-keyring uses too (godbus shares it process-wide).
	conn, err := dbus.SessionBus()
	if err != nil {
		return fmt.Errorf("%w: cannot connect to the D-Bus session bus: %v", ErrUnreachable, err)
	}
	svc := conn.Object(secretService, secretServicePath)
	// First a Ping (answered by the D-Bus library of the service): it
	// tells whether a Secret Service is there, and gnome-keyring must see
	// a connection's first message before a call that needs its client
	// record (its registration races the call, and losing aborts the
	// daemon: gnome-keyring issues #183, #190, #194).
	if err := svc.Call("org.freedesktop.DBus.Peer.Ping", 0).Err; err != nil {
		return platformKeychainError(err)
	}
	v, err := svc.GetProperty(secretCollections)
	if err != nil {
		return platformKeychainError(err)
	}
	path := dbus.ObjectPath(defaultAliasPath)
	if paths, ok := v.Value().([]dbus.ObjectPath); ok && slices.Contains(paths, loginCollectionPath) {
		path = loginCollectionPath
	}
	v, err = conn.Object(secretService, path).GetProperty(secretLocked)
	if err != nil {
		return platformKeychainError(err)
	}
	if locked, ok := v.Value().(bool); ok && locked {
		return fmt.Errorf("%w: the login keyring (Secret Service collection %s) is locked; coily does not unlock it: unlock it on the host (log in to the desktop session, or open it in Passwords and Keys) and retry", ErrLocked, path)
	}
	return nil
}

// sessionBusKnown reports whether godbus would find a session bus without
// autolaunching one (it runs dbus-launch when it finds none, starting
// daemons that outlive the server).
func sessionBusKnown() bool {
	if a := os.Getenv("DBUS_SESSION_BUS_ADDRESS"); a != "" && a != "autolaunch:" {
		return true
	}
	dir := fmt.Sprintf("/run/user/%d/", os.Getuid())
	for _, name := range []string{"bus", "dbus-session"} {
		if _, err := os.Stat(dir + name); err == nil {
			return true
		}
	}
	return false
}

// platformKeychainError maps D-Bus and go-keyring errors. A D-Bus error
// is reported by its name only (its text comes from the other side).
func platformKeychainError(err error) error {
	var de dbus.Error
	var dp *dbus.Error
	switch {
	case errors.As(err, &dp):
		de = *dp
	case errors.As(err, &de):
	case errors.Is(err, dbus.ErrClosed):
		return fmt.Errorf("%w: the D-Bus connection closed", ErrUnreachable)
	case strings.HasPrefix(err.Error(), "failed to unlock"):
		// go-keyring's Unlock when the unlock prompt was dismissed or
		// could not be shown.
		return fmt.Errorf("%w: the keyring is locked and could not be unlocked without a prompt; unlock it on the host and retry", ErrLocked)
	default:
		return fmt.Errorf("%w: Secret Service: %v", ErrUnreachable, err)
	}
	switch de.Name {
	case "org.freedesktop.Secret.Error.IsLocked":
		return fmt.Errorf("%w: the keyring is locked; unlock it on the host and retry", ErrLocked)
	case "org.freedesktop.Secret.Error.NoSuchObject", "org.freedesktop.DBus.Error.UnknownObject":
		return fmt.Errorf("%w: the Secret Service has no such collection or item (%s)", ErrNotFound, de.Name)
	case "org.freedesktop.DBus.Error.AccessDenied":
		return fmt.Errorf("%w: the Secret Service refused (%s)", ErrDenied, de.Name)
	case "org.freedesktop.DBus.Error.ServiceUnknown", "org.freedesktop.DBus.Error.NameHasNoOwner":
		return fmt.Errorf("%w: no Secret Service on the session bus (%s): is a keyring daemon (gnome-keyring, KeePassXC, ...) running?", ErrUnreachable, de.Name)
	default:
		return fmt.Errorf("%w: Secret Service error %s", ErrUnreachable, de.Name)
	}
}
