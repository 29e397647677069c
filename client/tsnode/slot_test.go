package tsnode

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// register makes slot n of root look registered (tsnet's state file).
func register(t *testing.T, root string, n int) {
	t.Helper()
	dir := filepath.Join(root, "node-"+strconv.Itoa(n))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, stateFile), []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestUsableSlots(t *testing.T) {
	for _, tt := range []struct {
		name       string
		registered []int
		haveKey    bool
		want       []int
	}{
		{"nothing registered, no key: node-0, to say it needs a key", nil, false, []int{0}},
		{"nothing registered, a key: any", nil, true, []int{0, 1, 2, 3}},
		{"some registered, no key: those only", []int{0, 2}, false, []int{0, 2}},
		{"some registered, a key: any", []int{2}, true, []int{0, 1, 2, 3}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			for _, n := range tt.registered {
				register(t, root, n)
			}
			if got := usable(root, 4, tt.haveKey); !slices.Equal(got, tt.want) {
				t.Fatalf("usable = %v; want %v", got, tt.want)
			}
		})
	}
}

// A state file that is a symbolic link is not a registration.
func TestUsableSlotsSymlinkState(t *testing.T) {
	root := t.TempDir()
	register(t, root, 0)
	dir := filepath.Join(root, "node-1")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(root, "node-0", stateFile), filepath.Join(dir, stateFile)); err != nil {
		t.Fatal(err)
	}
	if got := usable(root, 2, false); !slices.Equal(got, []int{0}) {
		t.Fatalf("usable = %v; want [0]", got)
	}
}

func TestTakeSlotSkipsHeldAndKeepsPort(t *testing.T) {
	root := t.TempDir()
	register(t, root, 0)
	register(t, root, 1)
	a, err := takeSlot(t.Context(), root, 4, false)
	if err != nil || a.n != 0 {
		t.Fatalf("first: %+v %v; want node-0", a, err)
	}
	b, err := takeSlot(t.Context(), root, 4, false)
	if err != nil || b.n != 1 {
		t.Fatalf("second: %+v %v; want node-1 (node-0 is held)", b, err)
	}
	if _, err := lockSlot(root, 0); !errors.Is(err, errBusy) {
		t.Fatalf("node-0 while held: %v; want errBusy", err)
	}
	p := a.port()
	if p == 0 || a.port() != p {
		t.Fatalf("port %d, then %d; want one port, kept", p, a.port())
	}
	if b.port() == p {
		t.Fatalf("node-1 got node-0's port %d", p)
	}
	a.release()
	c, err := takeSlot(t.Context(), root, 4, false)
	if err != nil || c.n != 0 || c.port() != p {
		t.Fatalf("after release: %+v %v port %d; want node-0 again with port %d", c, err, c.port(), p)
	}
	c.release()
	b.release()
}

// A port file that does not hold a port is replaced.
func TestSlotPortMalformed(t *testing.T) {
	root := t.TempDir()
	s, err := takeSlot(t.Context(), root, 1, true)
	if err != nil {
		t.Fatal(err)
	}
	defer s.release()
	for _, bad := range []string{"", "0", "65536", "-1", "abc", "12 34"} {
		if err := os.WriteFile(filepath.Join(s.dir, portFile), []byte(bad), 0o600); err != nil {
			t.Fatal(err)
		}
		if p := s.port(); p == 0 {
			t.Errorf("port file %q: port 0; want a fresh port", bad)
		}
	}
}

// The state directory and each node's are refused unless they are this
// user's private directories: in a shared /tmp another user could create
// them first, to read the node keys or plant their own.
func TestTakeSlotRefusesForeignStateDir(t *testing.T) {
	other := t.TempDir()
	for _, tt := range []struct {
		name string
		prep func(t *testing.T, root string) string // returns the path the error names
		want string
	}{
		{"root a symbolic link", func(t *testing.T, root string) string {
			mustSymlink(t, other, root)
			return root
		}, "symbolic link"},
		{"root a dangling symbolic link", func(t *testing.T, root string) string {
			mustSymlink(t, filepath.Join(other, "nowhere"), root)
			return root
		}, ""},
		{"root a file", func(t *testing.T, root string) string {
			if err := os.WriteFile(root, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			return root
		}, ""},
		{"root mode 0777", func(t *testing.T, root string) string {
			mustMkdirMode(t, root, 0o777)
			return root
		}, "writable by other users"},
		{"root mode 0770", func(t *testing.T, root string) string {
			mustMkdirMode(t, root, 0o770)
			return root
		}, "writable by other users"},
		{"node-0 a symbolic link", func(t *testing.T, root string) string {
			mustMkdirMode(t, root, 0o700)
			mustSymlink(t, other, filepath.Join(root, "node-0"))
			return filepath.Join(root, "node-0")
		}, "symbolic link"},
		{"node-0 mode 0777", func(t *testing.T, root string) string {
			mustMkdirMode(t, root, 0o700)
			mustMkdirMode(t, filepath.Join(root, "node-0"), 0o777)
			return filepath.Join(root, "node-0")
		}, "writable by other users"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			root := filepath.Join(t.TempDir(), "coily-tsnet-1000")
			path := tt.prep(t, root)
			s, err := takeSlot(t.Context(), root, 1, true)
			if err == nil {
				s.release()
				t.Fatalf("takeSlot accepted %s", path)
			}
			if !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %q; want one naming %s and saying %q", err, path, tt.want)
			}
			if entries, _ := os.ReadDir(other); len(entries) != 0 {
				t.Fatalf("wrote through the link into %s: %v", other, entries)
			}
		})
	}
}

// A directory owned by another user is refused (root can make one).
func TestTakeSlotRefusesOtherOwner(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Log("not root: cannot give a directory to another user; the mode and link cases cover the rest")
		return
	}
	root := filepath.Join(t.TempDir(), "coily-tsnet-0")
	mustMkdirMode(t, root, 0o700)
	if err := os.Chown(root, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	if s, err := takeSlot(t.Context(), root, 1, true); err == nil || !strings.Contains(err.Error(), "owned by uid 65534") {
		if s != nil {
			s.release()
		}
		t.Fatalf("takeSlot of another user's directory: %v; want a refusal", err)
	}
}

// A directory of ours with a wider mode that others cannot write is
// narrowed to 0700.
func TestTakeSlotNarrowsOwnDir(t *testing.T) {
	root := filepath.Join(t.TempDir(), "coily-tsnet")
	mustMkdirMode(t, root, 0o755)
	mustMkdirMode(t, filepath.Join(root, "node-0"), 0o750)
	s, err := takeSlot(t.Context(), root, 1, true)
	if err != nil {
		t.Fatal(err)
	}
	defer s.release()
	for _, d := range []string{root, s.dir} {
		if fi, err := os.Stat(d); err != nil || fi.Mode().Perm() != 0o700 {
			t.Errorf("%s: %v %v; want mode 0700", d, fi.Mode(), err)
		}
	}
}

func mustSymlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

// mustMkdirMode makes dir with exactly mode (whatever the umask).
func mustMkdirMode(t *testing.T, dir string, mode os.FileMode) {
	t.Helper()
	if err := os.Mkdir(dir, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, mode); err != nil {
		t.Fatal(err)
	}
}

// A command waiting for a node of a pool that is all in use stops waiting
// as soon as its context ends, and says so.
func TestTakeSlotStopsOnCancel(t *testing.T) {
	root := t.TempDir()
	held, err := takeSlot(t.Context(), root, 1, true)
	if err != nil {
		t.Fatal(err)
	}
	defer held.release()

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	start := time.Now()
	if s, err := takeSlot(ctx, root, 1, true); !errors.Is(err, context.Canceled) {
		if s != nil {
			s.release()
		}
		t.Fatalf("cancelled: %v; want context.Canceled", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("a cancelled wait took %v", d)
	}

	ctx, cancel = context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		s, err := takeSlot(ctx, root, 1, true)
		if s != nil {
			s.release()
		}
		done <- err
	}()
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), root) {
			t.Fatalf("cancelled while waiting: %v; want context.Canceled naming %s", err, root)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("takeSlot kept waiting after its context was cancelled")
	}

	ctx, cancel = context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	if _, err := takeSlot(ctx, root, 1, true); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("past the caller's deadline: %v; want context.DeadlineExceeded", err)
	}
}
