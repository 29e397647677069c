package main

import (
	"crypto/sha256"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// snapshotDir describes every entry under dir (type, mode, size, mtime and,
// for files, a hash of the contents), skipping the tailnet node's own log
// buffers, which the running node rewrites on its own.
func snapshotDir(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		if regexp.MustCompile(`^tsnet/tailscaled\.log[0-9]*\.txt$`).MatchString(rel) {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "%s %v %d %d", rel, fi.Mode(), fi.Size(), fi.ModTime().UnixNano())
		if fi.Mode().IsRegular() {
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			fmt.Fprintf(&b, " %x", sha256.Sum256(data))
		}
		b.WriteByte('\n')
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// TestCLIDevSecondRunChangesNothing: a second `coily dev` on a directory a
// first one serves stops at once with a clear error and a distinct exit
// code, leaves every file as it was, and the first one keeps working.
func TestCLIDevSecondRunChangesNothing(t *testing.T) {
	dir := shortDir(t)
	first := startDev(t, dir, "--state-dir", dir)
	waitDir(t, filepath.Join(dir, "mount", ".coily", "tmp")) // the bridge is up: the first is done writing
	before := snapshotDir(t, dir)
	start := time.Now()
	r := runCoily(t, nil, "dev", "--state-dir", dir)
	if r.code != exitStateDirBusy {
		t.Fatalf("second coily dev: exit %d, want %d: %+v", r.code, exitStateDirBusy, r)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("the refusal took %v", took)
	}
	pid := "PID " + strconv.Itoa(first.cmd.Process.Pid)
	for _, want := range []string{dir, pid, "--state-dir"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("the refusal %q does not name %q", r.stderr, want)
		}
	}
	if after := snapshotDir(t, dir); after != before {
		t.Fatalf("the second coily dev changed the state dir:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	t.Setenv("COILY_DEV", dir)
	if r := runCoily(t, nil, "exec", "--", "/bin/echo", "hi"); r.code != 0 || r.stdout != "hi\n" {
		t.Fatalf("the first coily dev stopped working: %+v\n%s", r, first.log)
	}
	if code := first.stop(t); code != 0 {
		t.Errorf("the first coily dev exited %d:\n%s", code, first.log)
	}
}

// TestCLIServeSecondOnSameStateDir: `coily serve` takes the same lock, so
// neither a second server nor a `coily dev` runs on its state directory,
// and the refusal comes before bbolt's file lock timeout.
func TestCLIServeSecondOnSameStateDir(t *testing.T) {
	dir := shortDir(t)
	p := startServe(t, dir, examplePolicy(t))
	before := snapshotDir(t, dir)
	for _, args := range [][]string{
		{"serve", "--state-dir", dir, "--policy", examplePolicy(t)},
		{"dev", "--state-dir", dir},
	} {
		start := time.Now()
		r := runCoily(t, nil, args...)
		took := time.Since(start)
		if r.code != exitStateDirBusy || !strings.Contains(r.stderr, dir) ||
			!strings.Contains(r.stderr, "PID "+strconv.Itoa(p.cmd.Process.Pid)) {
			t.Fatalf("coily %s on a served state dir: %+v", args[0], r)
		}
		if strings.Contains(r.stderr, "NOT FOR PRODUCTION") {
			t.Errorf("coily dev printed its banner before it had the lock: %q", r.stderr)
		}
		if args[0] == "serve" && took >= 2*time.Second {
			t.Errorf("the refusal took %v: it waited for bbolt's lock", took)
		}
	}
	if after := snapshotDir(t, dir); after != before {
		t.Fatalf("the state dir changed:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	if r := p.run(t, "status"); r.code != 0 {
		t.Fatalf("the first server stopped answering: %+v\n%s", r, p.log)
	}
}
