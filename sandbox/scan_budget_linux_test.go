package sandbox

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// within fails the test unless f returns within 10 s (a scan blocked on
// a FIFO never would).
func within(t *testing.T, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { f(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s blocked", what)
	}
}

// A FIFO where a scan reads a file (a git directory's config, a fake
// repository's HEAD and config) never blocks it, before or after a
// command; after it, the new fake repository is quarantined all the same.
func TestScanAfterNeverBlocks(t *testing.T) {
	root := t.TempDir()
	gitRepo(t, filepath.Join(root, "owner/.git"))
	fifo := func(rel string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, rel)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Mkfifo(filepath.Join(root, rel), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Remove(filepath.Join(root, "owner/.git/config")); err != nil {
		t.Fatal(err)
	}
	fifo("owner/.git/config")
	var r scannedRoot
	within(t, "the scan before a command", func() { r = scanned(t, root, nil) })
	if err := os.MkdirAll(filepath.Join(root, "b2/objects"), 0o755); err != nil {
		t.Fatal(err)
	}
	fifo("b2/HEAD")
	fifo("b2/config")
	var done []string
	var err error
	within(t, "the scan after a command", func() { done, _, err = r.quarantine(nil, "T") })
	if err != nil || !slices.Contains(done, "b2") {
		t.Fatalf("quarantined %q (%v), want b2", done, err)
	}
}

// The scans keep to their budget. Before a command, a workspace past it
// is refused. After one, the directories the command made past the
// entries bound are moved aside unread, so the next scan covers the
// workspace; what cannot be moved (the workspace's own entries), or a
// scan out of time, is reported unchecked (the server then refuses the
// workspace), never waited on.
func TestScanAfterBudget(t *testing.T) {
	files := func(dir string, n int) {
		t.Helper()
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for i := range n {
			if err := os.WriteFile(filepath.Join(dir, "f"+strconv.Itoa(i)), nil, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	budget := ScanBudget{Entries: 10}
	check := func(r scannedRoot, b ScanBudget) checked { return r.check(nil, "T", r.since, b) }
	scan := func(root string) scannedRoot {
		t.Helper()
		r := scanned(t, root, nil)
		if _, err := scanRoot(r.dir, root, nil, false, budget); err != nil {
			t.Fatalf("scan before, within the budget: %v", err)
		}
		return r
	}

	root := t.TempDir()
	files(root, 5)
	r := scan(root)
	files(filepath.Join(root, "n1"), 50)
	files(filepath.Join(root, "n2/deeper"), 50)
	res := check(r, budget)
	if res.err != nil || !slices.Equal(res.aside, []string{"n1", "n2/deeper"}) {
		t.Fatalf("moved aside %q (%v), want n1 and n2/deeper", res.aside, res.err)
	}
	if _, err := scanRoot(r.dir, root, nil, false, budget); err != nil {
		t.Fatalf("the next scan: %v", err)
	}

	files(root, 60) // the workspace's own top directory: nothing to move
	res = check(r, budget)
	if !errors.Is(res.err, ErrScanBudget) {
		t.Fatalf("a flooded workspace: %v, want ErrScanBudget", res.err)
	}
	if _, err := scanRoot(r.dir, root, nil, false, budget); err == nil || !strings.Contains(err.Error(), "entries") {
		t.Fatalf("the scan before a command of a flooded workspace: %v", err)
	}

	small := t.TempDir()
	r = scan(small)
	if res := check(r, ScanBudget{Time: time.Nanosecond}); !errors.Is(res.err, ErrScanBudget) {
		t.Fatalf("a scan out of time: %v, want ErrScanBudget", res.err)
	}
	if _, err := scanRoot(r.dir, small, nil, false, ScanBudget{Time: time.Nanosecond}); !errors.Is(err, ErrScanBudget) {
		t.Fatalf("the scan before a command, out of time: %v", err)
	}
}

// An entry whose name leaves no room for a suffix (255 bytes) is
// quarantined all the same, under a short name in the quarantine
// directory, its manifest naming where it was.
func TestScanAfterLongName(t *testing.T) {
	root := t.TempDir()
	r := scanned(t, root, nil)
	name := strings.Repeat("r", 255)
	gitRepo(t, filepath.Join(root, name))
	done, _, err := r.quarantine(nil, "T")
	if err != nil || !slices.Equal(done, []string{name}) {
		t.Fatalf("quarantined %d entries (%v), want the repository", len(done), err)
	}
	if _, err := os.Stat(filepath.Join(root, QuarantineDir, "T-1/HEAD")); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(root, QuarantineDir, "T.json"))
	if err != nil || !strings.Contains(string(data), name) {
		t.Fatalf("manifest %s (%v)", data, err)
	}
}

// The quarantine directory is the server's: made 0700 (and set back to
// it), never a link or a file put in its place.
func TestScanAfterQuarantineDirectory(t *testing.T) {
	root := t.TempDir()
	dir, err := openRoot(root)
	if err != nil {
		t.Fatal(err)
	}
	defer dir.Close()
	q, err := openQuarantine(dir)
	if err != nil {
		t.Fatal(err)
	}
	q.Close()
	if err := os.Chmod(filepath.Join(root, QuarantineDir), 0o777); err != nil {
		t.Fatal(err)
	}
	if q, err = openQuarantine(dir); err != nil {
		t.Fatal(err)
	}
	q.Close()
	if fi, err := os.Stat(filepath.Join(root, QuarantineDir)); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("mode %v (%v), want 0700", fi.Mode(), err)
	}
	for _, plant := range []func(string) error{
		func(p string) error { return os.Symlink(t.TempDir(), p) },
		func(p string) error { return os.WriteFile(p, nil, 0o600) },
		func(p string) error { return syscall.Mkfifo(p, 0o600) },
	} {
		p := filepath.Join(root, QuarantineDir)
		if err := os.RemoveAll(p); err != nil {
			t.Fatal(err)
		}
		if err := plant(p); err != nil {
			t.Fatal(err)
		}
		within(t, "openQuarantine", func() {
			if q, err := openQuarantine(dir); err == nil {
				q.Close()
				t.Errorf("%s planted: opened", QuarantineDir)
			}
		})
	}
}

// The names matched by pattern: exactly the names each pattern covers.
func TestProtectedNameMatch(t *testing.T) {
	for name, want := range map[string]string{
		".env": ".env", ".env.local": ".env.*", ".env.": "", ".envrc": ".envrc", ".env-x": "",
		".aider.conf.yml": ".aider*", ".aider": ".aider*", ".claude": ".claude", ".mcp.json": ".mcp.json",
		".venv": ".venv", "venv": "", ".Claude": "", "x/.env": "", "": "",
	} {
		if got := anyDepthName(name); got != want {
			t.Errorf("anyDepthName(%q) = %q, want %q", name, got, want)
		}
	}
	for name, want := range map[string]string{
		"rebase-merge": ".git/rebase-merge", "MERGE_HEAD": ".git/MERGE_HEAD", "BISECT_LOG": ".git/BISECT_LOG",
		"BISECT_NEW": ".git/BISECT_*", "config": ".git/config", "objects": "", "ORIG_HEAD": "", "bisect_log": "",
	} {
		if got := gitCodeName(name); got != want {
			t.Errorf("gitCodeName(%q) = %q, want %q", name, got, want)
		}
	}
	if err := CheckWritable([]string{".env.*", ".aider*", ".venv", ".git/BISECT_*", ".git/rebase-merge", ".claude"}); err != nil {
		t.Error(err)
	}
}

// FuzzProtectedNameMatch: whatever a name, a match is a name a rule may
// opt in, and one the name really has.
func FuzzProtectedNameMatch(f *testing.F) {
	for _, s := range []string{".env", ".env.local", ".env.", ".aider.x", ".claude", "BISECT_X", "rebase-merge", "", "a/b", "\x00"} {
		f.Add(s)
	}
	writable := WritableNames()
	f.Fuzz(func(t *testing.T, name string) {
		for _, got := range []string{anyDepthName(name), gitCodeName(name)} {
			if got == "" {
				continue
			}
			if !slices.Contains(writable, got) {
				t.Fatalf("%q matched %q, which no rule may name", name, got)
			}
			base := strings.TrimPrefix(got, GitName+"/")
			if prefix, ok := strings.CutSuffix(base, "*"); ok {
				if !strings.HasPrefix(name, prefix) || name == prefix && strings.HasSuffix(prefix, ".") {
					t.Fatalf("%q matched %q", name, got)
				}
			} else if name != base {
				t.Fatalf("%q matched %q", name, got)
			}
		}
	})
}
