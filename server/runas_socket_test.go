package server

import (
	"path/filepath"
	"syscall"
	"testing"

	"os"
)

// An exec's agent and proxy sockets are its owner's alone, whatever the
// umask: 0600.
//
// It sets the process's umask: it must never run in parallel with others.
func TestListenUnixIsPrivate(t *testing.T) {
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	path := filepath.Join(t.TempDir(), "s.sock")
	l, err := listenUnix(path)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 || fi.Mode()&os.ModeSocket == 0 {
		t.Fatalf("socket %v %v, want 0600", fi.Mode(), err)
	}
}

// An execution's scratch directory has 128 random bits in its name and is
// its owner's alone until the server opens it.
func TestScratchDirName(t *testing.T) {
	parent := t.TempDir()
	seen := map[string]bool{}
	for range 50 {
		dir, err := scratchDir(parent, scratchPrefix)
		if err != nil {
			t.Fatal(err)
		}
		name := filepath.Base(dir)
		if len(name) != len(scratchPrefix)+32 || name[:len(scratchPrefix)] != scratchPrefix || seen[name] {
			t.Fatalf("name %q", name)
		}
		seen[name] = true
		if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
			t.Fatalf("%s: %v %v", dir, fi.Mode(), err)
		}
	}
}
