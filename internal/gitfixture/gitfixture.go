// Package gitfixture makes, in tests and benchmarks, the git checkouts
// they measure and probe workspaces with: one fixture, in one place.
package gitfixture

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
)

// Checkout makes root a git repository holding dirs directories (three
// levels: pkgN/modM/src) of files files each, and returns root.
func Checkout(tb testing.TB, root string, dirs, files int) string {
	tb.Helper()
	if out, err := exec.Command("git", "init", "-q", root).CombinedOutput(); err != nil {
		tb.Fatalf("git init: %v %s", err, out)
	}
	for d := range dirs {
		dir := filepath.Join(root, "pkg"+strconv.Itoa(d%10), "mod"+strconv.Itoa(d/10), "src")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			tb.Fatal(err)
		}
		for f := range files {
			if err := os.WriteFile(filepath.Join(dir, "file"+strconv.Itoa(f)+".go"), []byte("package x\n"), 0o644); err != nil {
				tb.Fatal(err)
			}
		}
	}
	return root
}
