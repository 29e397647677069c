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
	cmd := exec.Command("/bin/sh", "-c", "id -u; stat -c %u owned; echo more >> owned && mkdir made && echo y > made/new && chmod 600 owned && echo wrote && id -un")
	out, err := runWrapped(t, cmd, DefaultProfile(ProfileInput{Workspace: ws, Dir: ws, Home: t.TempDir(), Env: []string{"PATH=/usr/bin:/bin"},
		User: owner, Dynamic: &Dynamic{Pool: pool, User: u, MountDir: mnt}}))
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	want := strconv.Itoa(u.UID) + "\n" + strconv.Itoa(u.UID) + "\nwrote\n" + u.Name + "\n" // named: ssh looks it up
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

// The idmap maps every id to itself but the sandbox user's, which maps to
// the command's uid; the command's uid has no id of its own in it (an
// on-disk file of that uid shows as nobody's, and none is ever made).
func TestIdmapExtents(t *testing.T) {
	for _, c := range []struct{ owner, uid int }{{65534, 0x70000000}, {1000, 500}, {0x7fffffff, 5}} {
		ext := idmapExtents(c.owner, c.uid)
		mapDown := func(id int) (int, bool) {
			for _, e := range ext {
				if id >= e.ContainerID && id < e.ContainerID+e.Size {
					return e.HostID + id - e.ContainerID, true
				}
			}
			return 0, false
		}
		for _, id := range []int{0, 1, c.owner - 1, c.owner + 1, c.uid - 1, c.uid + 1, maxID} {
			if id == c.owner || id == c.uid {
				continue
			}
			if got, ok := mapDown(id); !ok || got != id {
				t.Errorf("%+v: %d maps to %d %v, want itself", c, id, got, ok)
			}
		}
		if got, ok := mapDown(c.owner); !ok || got != c.uid {
			t.Errorf("%+v: the owner maps to %d %v", c, got, ok)
		}
		if _, ok := mapDown(c.uid); ok {
			t.Errorf("%+v: the command's uid has an id of its own", c)
		}
		taken := 0 // extents whose host ids hold the command's uid
		for _, e := range ext {
			if c.uid >= e.HostID && c.uid < e.HostID+e.Size {
				taken++
			}
		}
		if taken != 1 {
			t.Errorf("%+v: the command's uid is in %d extents' host ids, want 1", c, taken)
		}
		if len(ext) > 340 {
			t.Errorf("%d extents", len(ext))
		}
	}
}

// Two pools over one range (two servers, or tests, on one host) never
// hand out the same uid at once; a released uid is handed out again.
func TestUIDPoolsShareARange(t *testing.T) {
	a := testPool(t)
	if a == nil {
		return
	}
	first, count := a.Range()
	b, err := NewUIDPool(first, count, a.Owner())
	if err != nil {
		t.Fatal(err)
	}
	held := map[int]bool{}
	var users []User
	for i := 0; i < count; i++ {
		p := a
		if i%2 == 1 {
			p = b
		}
		u, err := p.Acquire()
		if err != nil {
			t.Fatalf("acquire %d of %d: %v", i+1, count, err)
		}
		if held[u.UID] {
			t.Fatalf("uid %d handed out twice", u.UID)
		}
		held[u.UID] = true
		users = append(users, u)
	}
	if _, err := a.Acquire(); err == nil {
		t.Fatal("a uid past the range's")
	}
	a.Release(users[0], func(err error) { t.Error(err) })
	a.Wait()
	if u, err := a.Acquire(); err != nil || u.UID != users[0].UID {
		t.Fatalf("after a release: %v %v, want uid %d again", u, err, users[0].UID)
	}
}

// A range holding a host user, the sandbox user or uid 0 is refused.
func TestUIDPoolRefusesHostIDs(t *testing.T) {
	if testPool(t) == nil {
		return
	}
	owner := DefaultUser()
	for _, r := range [][2]int{{0, 10}, {owner.UID - 1, 3}, {1, 5}, {1<<32 - 3, 4}} {
		if _, err := NewUIDPool(r[0], r[1], owner); err == nil {
			t.Errorf("range %d+%d accepted", r[0], r[1])
		}
	}
}
