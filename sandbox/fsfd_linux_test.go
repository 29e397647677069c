package sandbox

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
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
