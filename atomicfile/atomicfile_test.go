package atomicfile

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// leftovers lists what is in dir besides want.
func leftovers(t *testing.T, dir string, want ...string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var extra []string
	for _, e := range ents {
		found := false
		for _, w := range want {
			found = found || e.Name() == w
		}
		if !found {
			extra = append(extra, e.Name())
		}
	}
	return extra
}

func TestWriteReplacesWholeWithMode(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	for _, c := range []struct {
		data string
		perm fs.FileMode
	}{{"first", 0o600}, {"second, longer", 0o644}, {"", 0o600}} {
		if err := Write(path, []byte(c.data), c.perm); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(path)
		if err != nil || string(got) != c.data {
			t.Fatalf("read %q, %v; want %q", got, err, c.data)
		}
		fi, _ := os.Stat(path)
		if fi.Mode().Perm() != c.perm {
			t.Errorf("mode %v, want %v", fi.Mode().Perm(), c.perm)
		}
	}
	if extra := leftovers(t, dir, "f"); len(extra) > 0 {
		t.Errorf("left behind: %v", extra)
	}
}

// A symbolic link at the path is replaced, never written through.
func TestWriteReplacesALink(t *testing.T) {
	dir := t.TempDir()
	target, path := filepath.Join(dir, "target"), filepath.Join(dir, "f")
	if err := os.WriteFile(target, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, path); err != nil {
		t.Fatal(err)
	}
	if err := Write(path, []byte("new"), 0o600); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(target); string(b) != "keep" {
		t.Errorf("the link's target was written: %q", b)
	}
	if fi, _ := os.Lstat(path); fi.Mode()&fs.ModeSymlink != 0 {
		t.Error("the link is still there")
	}
}

// A write that cannot be renamed into place (a directory is there) fails
// and leaves no temporary file.
func TestWriteFailureLeavesNothing(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "f"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "f", "x"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := Write(filepath.Join(dir, "f"), []byte("data"), 0o600); err == nil {
		t.Fatal("a write over a non-empty directory succeeded")
	}
	if extra := leftovers(t, dir, "f"); len(extra) > 0 {
		t.Errorf("left behind: %v", extra)
	}
	if err := Write(filepath.Join(dir, "missing", "f"), []byte("data"), 0o600); err == nil {
		t.Fatal("a write into a missing directory succeeded")
	}
}

func TestCreateOnlyOnce(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "id")
	if err := Create(path, []byte("one"), 0o600); err != nil {
		t.Fatal(err)
	}
	err := Create(path, []byte("two"), 0o600)
	if !errors.Is(err, fs.ErrExist) {
		t.Fatalf("second Create: %v, want fs.ErrExist", err)
	}
	if b, _ := os.ReadFile(path); string(b) != "one" {
		t.Errorf("the first file was replaced: %q", b)
	}
	if extra := leftovers(t, dir, "id"); len(extra) > 0 {
		t.Errorf("left behind: %v", extra)
	}
}

func TestSyncDirMissing(t *testing.T) {
	if err := SyncDir(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Fatal("SyncDir of a missing directory succeeded")
	}
}
