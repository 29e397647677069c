package access_test

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"coily.dev/coily/access"
)

func socketPath(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "coily-sock-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return filepath.Join(dir, "s.sock")
}

func TestListenLocalModes(t *testing.T) {
	path := socketPath(t)
	l, err := access.ListenLocal(path, "")
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 || fi.Mode()&os.ModeSocket == 0 {
		t.Fatalf("socket %v %v, want a 0600 socket", fi.Mode(), err)
	}
	l.Close()
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatal("closing the listener did not remove the socket")
	}

	if os.Geteuid() != 0 {
		return // chown to another group needs root
	}
	gid, err := access.LookupGroup("nogroup")
	if err != nil {
		t.Fatal(err)
	}
	l, err = access.ListenLocal(path, "nogroup")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	fi, _ = os.Stat(path)
	st := fi.Sys().(*syscall.Stat_t)
	if fi.Mode().Perm() != 0o660 || int(st.Gid) != gid {
		t.Fatalf("socket with operator group: mode %v gid %d, want 0660 gid %d", fi.Mode().Perm(), st.Gid, gid)
	}
}

func TestListenLocalRefusesToClobber(t *testing.T) {
	path := socketPath(t)
	if err := os.WriteFile(path, []byte("not a socket"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := access.ListenLocal(path, ""); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Fatalf("over a regular file: %v", err)
	}
	os.Remove(path)

	live, err := access.ListenLocal(path, "")
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	if _, err := access.ListenLocal(path, ""); err == nil || !strings.Contains(err.Error(), "another server") {
		t.Fatalf("over a live socket: %v", err)
	}
}

func TestListenLocalReplacesStaleSocket(t *testing.T) {
	path := socketPath(t)
	stale, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	stale.SetUnlinkOnClose(false)
	stale.Close() // the file stays, nobody listens: a crashed server's socket
	l, err := access.ListenLocal(path, "")
	if err != nil {
		t.Fatalf("stale socket not replaced: %v", err)
	}
	l.Close()
}
