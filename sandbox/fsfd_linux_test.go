package sandbox

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// openRoot opens a root only by a path without links: a link anywhere in
// it (the root itself, or a parent) is refused, never followed; a real
// directory opens.
func TestOpenRootRefusesLinks(t *testing.T) {
	base, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	real, outside := filepath.Join(base, "real", "ws"), filepath.Join(base, "outside")
	for _, d := range []string{real, outside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(outside, filepath.Join(base, "ws-link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(base, "real"), filepath.Join(base, "parent-link")); err != nil {
		t.Fatal(err)
	}
	f, err := openRoot(real)
	if err != nil {
		t.Fatalf("a real directory: %v", err)
	}
	f.Close()
	for _, p := range []string{filepath.Join(base, "ws-link"), filepath.Join(base, "parent-link", "ws")} {
		for name, open := range map[string]func(string) (*os.File, error){"openat2": openRoot, "walk": walkRoot} {
			f, err := open(p)
			if err == nil {
				f.Close()
				t.Errorf("%s %s: opened through a link", name, p)
			} else if !errors.Is(err, errSymlink) {
				t.Errorf("%s %s: %v, want a symbolic-link refusal", name, p, err)
			}
		}
	}
	for _, bad := range []string{"relative", base + "/real/../outside", ""} {
		if f, err := openRoot(bad); err == nil {
			f.Close()
			t.Errorf("%q: opened", bad)
		}
	}
	if f, err := walkRoot(real); err != nil {
		t.Errorf("walk, a real directory: %v", err)
	} else {
		f.Close()
	}
}

// openBeneath and its component-by-component twin walkBeneath (kernels
// before 5.6) agree on every way out of a root: a symbolic link at the
// end or in the middle (to outside, to inside, dangling), `..`, an
// absolute or unclean path, and a mount point inside the root (another
// file system: a tmpfs mounted there by someone with the right). Plain
// entries open, a hard link included: hard links to directories do not
// exist, and a file's other names are the scan's business (it refuses a
// protected file with more than one link).
func TestOpenBeneathRefusesEveryWayOut(t *testing.T) {
	base, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	root, outside := filepath.Join(base, "root"), filepath.Join(base, "outside")
	for _, d := range []string{filepath.Join(root, "a", "b"), outside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for name, content := range map[string]string{"a/b/file": "x", "../outside/secret": "s"} {
		if err := os.WriteFile(filepath.Join(root, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for link, target := range map[string]string{
		"out": outside, "a/in": filepath.Join(root, "a", "b"), "a/rel": "../a/b", "dangling": "/nonexistent/x",
		"a/b/up": "../../..", "a/b/secret": "../../../outside/secret",
	} {
		if err := os.Symlink(target, filepath.Join(root, link)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Link(filepath.Join(root, "a", "b", "file"), filepath.Join(root, "hard")); err != nil {
		t.Fatal(err)
	}
	mount := filepath.Join(root, "mnt")
	mounted := false
	if os.Geteuid() == 0 {
		if err := os.Mkdir(mount, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := unix.Mount("tmpfs", mount, "tmpfs", 0, "size=64k"); err == nil {
			mounted = true
			t.Cleanup(func() { unix.Unmount(mount, unix.MNT_DETACH) })
			if err := os.Mkdir(filepath.Join(mount, "d"), 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	if os.Geteuid() == 0 && !mounted {
		t.Fatal("root could not mount a tmpfs to test crossing a mount point")
	}
	rf, err := openRoot(root)
	if err != nil {
		t.Fatal(err)
	}
	defer rf.Close()
	open := map[string]func(*os.File, string, int) (*os.File, error){"openat2": openBeneath, "walk": walkBeneath}
	for _, ok := range []string{"a", "a/b", "a/b/file", "hard", "."} {
		for name, f := range open {
			if ok == "." && name == "walk" {
				continue // openBeneath's own shortcut
			}
			h, err := f(rf, ok, unix.O_RDONLY)
			if err != nil {
				t.Errorf("%s %s: %v", name, ok, err)
				continue
			}
			h.Close()
		}
	}
	refused := []string{"out", "out/secret", "a/in", "a/in/file", "a/rel", "dangling", "a/b/up", "a/b/secret"}
	for _, bad := range refused {
		for name, f := range open {
			h, err := f(rf, bad, unix.O_RDONLY)
			if err == nil {
				h.Close()
				t.Errorf("%s %s: opened through a link", name, bad)
			} else if !errors.Is(err, errSymlink) {
				t.Errorf("%s %s: %v, want a symbolic-link refusal", name, bad, err)
			}
		}
	}
	for _, bad := range []string{"..", "../outside", "a/../../outside", "/etc", "a//b", "a/./b", "a/b/"} {
		if h, err := openBeneath(rf, bad, unix.O_RDONLY); err == nil {
			h.Close()
			t.Errorf("openBeneath %q: opened", bad)
		}
	}
	if mounted {
		for name, f := range open {
			for _, p := range []string{"mnt", "mnt/d"} {
				h, err := f(rf, p, unix.O_RDONLY)
				if err == nil {
					h.Close()
					t.Errorf("%s %s: crossed into another mount", name, p)
				} else if !errors.Is(err, unix.EXDEV) {
					t.Errorf("%s %s: %v, want EXDEV", name, p, err)
				}
			}
		}
	}
}
