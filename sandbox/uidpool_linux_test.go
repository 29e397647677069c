package sandbox

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// testPool is a pool over a small range of this test process's own, as a
// root server's, whose files nobody owns; nil, after checking that the
// pool is refused, for a test not running as root (its sandboxes run as
// itself: there is no other uid to give).
func testPool(t *testing.T) *UIDPool {
	t.Helper()
	requireBwrapT(t)
	first := 0x60000000 + (os.Getpid()%4096)*16
	p, err := NewUIDPool(first, 16, DefaultUser())
	if os.Geteuid() != 0 {
		if err == nil || !strings.Contains(err.Error(), "root") {
			t.Fatalf("a pool for a caller not running as root: %v", err)
		}
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Wait)
	return p
}

func requireBwrapT(t *testing.T) {
	t.Helper()
	if _, err := BwrapPath(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
}

// dynamicWorkspace is a workspace the sandbox user owns, holding a file
// of its own, in a directory every user may pass.
func dynamicWorkspace(t *testing.T, owner User) string {
	t.Helper()
	parent := t.TempDir()
	if err := os.Chmod(parent, 0o711); err != nil {
		t.Fatal(err)
	}
	for d := filepath.Dir(parent); d != "/"; d = filepath.Dir(d) {
		if fi, err := os.Stat(d); err == nil && fi.Mode().Perm()&0o001 == 0 {
			if err := os.Chmod(d, fi.Mode().Perm()|0o001); err != nil {
				t.Fatal(err)
			}
		}
	}
	ws := filepath.Join(parent, "ws")
	if err := os.Mkdir(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ws, "owned"), []byte("x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{ws, filepath.Join(ws, "owned")} {
		if err := os.Chown(p, owner.UID, owner.GID); err != nil {
			t.Fatal(err)
		}
	}
	return ws
}

// A command with a uid of its own runs as that uid, sees the sandbox
// user's files as its own and may change them, and what it writes is the
// sandbox user's on disk; its mount is gone after.
func TestBwrapDynamicUID(t *testing.T) {
	pool := testPool(t)
	if pool == nil {
		return
	}
	owner := pool.Owner()
	ws := dynamicWorkspace(t, owner)
	u, err := pool.Acquire()
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Release(u, func(err error) { t.Error(err) })
	mnt := t.TempDir()
	if err := os.Chmod(mnt, 0o711); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("/bin/sh", "-c", "id -u; stat -c %u owned; echo more >> owned && mkdir made && echo y > made/new && chmod 600 owned && echo wrote")
	out, err := runWrapped(t, cmd, DefaultProfile(ProfileInput{Workspace: ws, Dir: ws, Home: t.TempDir(), Env: []string{"PATH=/usr/bin:/bin"},
		User: owner, Dynamic: &Dynamic{Pool: pool, User: u, MountDir: mnt}}))
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	want := strconv.Itoa(u.UID) + "\n" + strconv.Itoa(u.UID) + "\nwrote\n"
	if out != want {
		t.Errorf("inside: %q, want %q", out, want)
	}
	for _, p := range []string{"owned", "made", "made/new"} {
		var st syscall.Stat_t
		if err := syscall.Lstat(filepath.Join(ws, p), &st); err != nil || int(st.Uid) != owner.UID {
			t.Errorf("%s on disk: uid %d, %v; want the sandbox user's %d", p, st.Uid, err, owner.UID)
		}
	}
	if data, _ := os.ReadFile(filepath.Join(ws, "owned")); string(data) != "x\nmore\n" {
		t.Errorf("owned: %q", data)
	}
	if entries, _ := os.ReadDir(mnt); len(entries) != 0 {
		t.Errorf("mount directory after: %v", entries)
	}
	if points, _ := mountsUnder(mnt); len(points) != 0 {
		t.Errorf("still mounted: %v", points)
	}
}
