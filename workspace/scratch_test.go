package workspace

import (
	"path/filepath"
	"testing"

	"os"
)

// An execution's scratch directory has 128 random bits in its name and is
// its owner's alone until the server opens it.
func TestScratchDirName(t *testing.T) {
	parent := t.TempDir()
	seen := map[string]bool{}
	for range 50 {
		dir, err := NewDir(parent, ScratchPrefix)
		if err != nil {
			t.Fatal(err)
		}
		name := filepath.Base(dir)
		if len(name) != len(ScratchPrefix)+32 || name[:len(ScratchPrefix)] != ScratchPrefix || seen[name] {
			t.Fatalf("name %q", name)
		}
		seen[name] = true
		if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
			t.Fatalf("%s: %v %v", dir, fi.Mode(), err)
		}
	}
}
