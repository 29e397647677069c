// Package diskfault gives tests a directory whose writes they can make
// fail and succeed again with the kernel's own refusals: as root a small
// tmpfs that the test fills (ENOSPC, a full disk), as any other user a
// directory the test makes read-only (EACCES: what a server user meets
// when its state directory's owner or mode changed under it). Root
// ignores a directory's mode, so it gets the full disk instead.
package diskfault

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
)

// Disk is a directory whose writes Fail and Heal toggle.
type Disk struct {
	// Dir is the directory (a tmpfs mount point as root).
	Dir    string
	filler string
	root   bool
}

// New returns a Disk in a new temporary directory; as root it is a tmpfs
// of size bytes, unmounted when the test ends (after the test's own
// cleanups registered later, which close what they opened in it).
func New(t testing.TB, size string) *Disk {
	t.Helper()
	dir, err := os.MkdirTemp("", "diskfault-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	d := &Disk{Dir: dir, filler: filepath.Join(dir, ".filler"), root: os.Geteuid() == 0}
	if d.root {
		if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size+",mode=0700", "tmpfs", dir).CombinedOutput(); err != nil {
			t.Fatalf("mount tmpfs: %v %s", err, out)
		}
		t.Cleanup(func() { _ = exec.Command("umount", "-l", dir).Run() })
	}
	return d
}

// Fail makes new writes under sub (a directory in Dir) fail: as root by
// filling the whole file system, otherwise by making sub read-only.
func (d *Disk) Fail(t testing.TB, sub string) {
	t.Helper()
	if !d.root {
		if err := os.Chmod(sub, 0o500); err != nil {
			t.Fatal(err)
		}
		return
	}
	f, err := os.Create(d.filler)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 64<<10)
	for _, n := range []int{len(buf), 4096, 512, 1} {
		for {
			_, err := f.Write(buf[:n])
			if err == nil {
				continue
			}
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			break
		}
	}
}

// Heal undoes Fail.
func (d *Disk) Heal(t testing.TB, sub string) {
	t.Helper()
	if !d.root {
		if err := os.Chmod(sub, 0o700); err != nil {
			t.Fatal(err)
		}
		return
	}
	if err := os.Remove(d.filler); err != nil {
		t.Fatal(err)
	}
}
