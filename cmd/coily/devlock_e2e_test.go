//go:build coilydev

package main

import (
	"bytes"
	"coily.dev/coily/cli"
	"coily.dev/coily/internal/testlog"
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

	"coily.dev/coily/client/folder"
)

// snapshotDir describes every entry under dir (type, mode, size, mtime and,
// for files, a hash of the contents), skipping the tailnet nodes' own log
// buffers (the server's and the console's), which a running node rewrites on its own.
func snapshotDir(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		if regexp.MustCompile(`^tsnet[^/]*/tailscaled\.log[0-9]*\.txt$`).MatchString(rel) {
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

// TestCLIDevRestartKeepsDemoKey runs `coily dev` with its default state
// directory (root too: never /var/lib/coily), stops it and starts it
// again: the demo key file is kept and a sandbox holding it still gets its
// requests through. A key file that no longer matches is replaced.
func TestCLIDevRestartKeepsDemoKey(t *testing.T) {
	runtime := shortDir(t)
	t.Setenv("XDG_RUNTIME_DIR", runtime)
	t.Setenv("COILY_STATE_DIR", "")
	os.Unsetenv("COILY_STATE_DIR")
	prodBefore, prodErr := os.Lstat(cli.ProductionStateDir)
	dir := filepath.Join(runtime, "coily-dev")
	keyPath := filepath.Join(dir, "demo.key")

	first := startDev(t, dir)
	if prodAfter, err := os.Lstat(cli.ProductionStateDir); (err == nil) != (prodErr == nil) ||
		(err == nil && !prodAfter.ModTime().Equal(prodBefore.ModTime())) {
		t.Fatalf("coily dev touched %s", cli.ProductionStateDir)
	}
	key, _ := os.ReadFile(keyPath)
	keyInfo, _ := os.Stat(keyPath)
	if code := first.stop(t); code != 0 {
		t.Fatalf("coily dev exited %d:\n%s", code, first.log)
	}

	second := startDev(t, dir)
	waitLog(t, second.log, "kept the demo sandbox's key")
	if again, _ := os.ReadFile(keyPath); !bytes.Equal(again, key) {
		t.Fatal("the restart replaced the demo key file")
	}
	if info, _ := os.Stat(keyPath); !info.ModTime().Equal(keyInfo.ModTime()) {
		t.Fatal("the restart rewrote the demo key file")
	}
	devSandboxExec(t, dir)
	if code := second.stop(t); code != 0 {
		t.Fatalf("coily dev exited %d:\n%s", code, second.log)
	}
	if n := strings.Count(readAudit(t, dir), `"event":"key.rotate"`); n != 0 {
		t.Fatalf("the audit log shows %d key rotations, want none", n)
	}

	// A key file the server no longer holds (here: a foreign key of the
	// right form) is replaced at the next start, and the new one works.
	stale := folder.KeyFile{Sandbox: devSandbox, Key: bytes.Repeat([]byte{7}, 32), Generation: 1}
	if err := os.Remove(keyPath); err != nil {
		t.Fatal(err)
	}
	if err := folder.WriteKeyFile(keyPath, stale); err != nil {
		t.Fatal(err)
	}
	third := startDev(t, dir)
	waitLog(t, third.log, "issuing the demo sandbox's key")
	waitFileChange(t, keyPath, stale)
	devSandboxExec(t, dir)
	if n := strings.Count(readAudit(t, dir), `"event":"key.rotate"`); n != 1 {
		t.Fatalf("the audit log shows %d key rotations, want 1", n)
	}
}

// waitLog waits until the process log holds want.
func waitLog(t *testing.T, log *testlog.Buffer, want string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(log.String(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("the log never said %q:\n%s", want, log)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitFileChange waits until the key file holds a key other than old.
func waitFileChange(t *testing.T, path string, old folder.KeyFile) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if k, err := folder.ReadKeyFile(path); err == nil && !bytes.Equal(k.Key, old.Key) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s was not replaced", path)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
