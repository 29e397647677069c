package sandbox

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"coily.dev/coily/internal/gitfixture"
)

// benchCheckout makes a git checkout of 3000 files in 150 directories
// (three levels), a few protected names among them.
func benchCheckout(b *testing.B) string {
	b.Helper()
	root := gitfixture.Checkout(b, b.TempDir(), 150, 20)
	for _, f := range []string{".envrc", "pkg1/.npmrc", ".vscode/settings.json"} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, f)), 0o755); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, f), nil, 0o644); err != nil {
			b.Fatal(err)
		}
	}
	return root
}

// BenchmarkScan: the scan before a command (protected entries opened for
// binding, as Wrap does) and the check after it, of a git checkout of
// 3000 files where the command changed nothing.
// Run: go test -run '^$' -bench Scan ./sandbox/
func BenchmarkScan(b *testing.B) {
	root := benchCheckout(b)
	dir, err := openRoot(root)
	if err != nil {
		b.Fatal(err)
	}
	defer dir.Close()
	b.Run("before", func(b *testing.B) {
		for range b.N {
			found, err := benchBefore(dir, root)
			if err != nil {
				b.Fatal(err)
			}
			for _, e := range found {
				e.file.Close()
			}
		}
	})
	b.Run("after", func(b *testing.B) {
		r := &writableRoot{path: root, dir: dir}
		found, err := benchBefore(dir, root)
		if err != nil {
			b.Fatal(err)
		}
		r.found = found
		since := time.Now()
		b.ResetTimer()
		for range b.N {
			if err := benchAfter(r, since); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func benchBefore(dir *os.File, root string) ([]protected, error) {
	return scanRoot(dir, root, nil, true, ScanBudget{})
}

func benchAfter(r *writableRoot, since time.Time) error {
	if r.quarantine == nil {
		q, err := openQuarantine(r.dir)
		if err != nil {
			return err
		}
		r.quarantine = q
	}
	return r.check(nil, "B", since, ScanBudget{}).err
}
