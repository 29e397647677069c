package attach

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// An exec's agent and proxy sockets are its owner's alone, whatever the
// umask: 0600.
//
// It sets the process's umask: it must never run in parallel with others.
func TestListenUnixIsPrivate(t *testing.T) {
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	path := filepath.Join(t.TempDir(), "s.sock")
	l, err := ListenUnix(path)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 || fi.Mode()&os.ModeSocket == 0 {
		t.Fatalf("socket %v %v, want 0600", fi.Mode(), err)
	}
}
