package tsnode

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
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
	a, err := takeSlot(root, 4, false)
	if err != nil || a.n != 0 {
		t.Fatalf("first: %+v %v; want node-0", a, err)
	}
	b, err := takeSlot(root, 4, false)
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
	c, err := takeSlot(root, 4, false)
	if err != nil || c.n != 0 || c.port() != p {
		t.Fatalf("after release: %+v %v port %d; want node-0 again with port %d", c, err, c.port(), p)
	}
	c.release()
	b.release()
}

// A port file that does not hold a port is replaced.
func TestSlotPortMalformed(t *testing.T) {
	root := t.TempDir()
	s, err := takeSlot(root, 1, true)
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
