// Package statedir says where a coily server on this host keeps its state
// (store, audit log, socket) unless told: what `coily serve` uses and what
// the clients look for.
package statedir

import (
	"os"
	"path/filepath"
)

// Production is `coily serve`'s state directory as root, the one the
// shipped unit uses.
const Production = "/var/lib/coily"

// Default is Production for root, else $XDG_STATE_HOME/coily or
// ~/.local/state/coily.
func Default() string {
	if os.Geteuid() == 0 {
		return Production
	}
	if d := os.Getenv("XDG_STATE_HOME"); d != "" {
		return filepath.Join(d, "coily")
	}
	if h, err := os.UserHomeDir(); err == nil {
		return filepath.Join(h, ".local", "state", "coily")
	}
	return "coily-state"
}

// Socket is the server's local socket in dir.
func Socket(dir string) string { return filepath.Join(dir, "coily.sock") }

// GitSocket is the git proxy's local socket in dir (plain HTTP/1.1,
// package gitproxy).
func GitSocket(dir string) string { return filepath.Join(dir, "git.sock") }
