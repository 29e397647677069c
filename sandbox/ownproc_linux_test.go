package sandbox

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestInitialPIDNamespace(t *testing.T) {
	for _, tc := range []struct {
		stat string
		want bool
	}{
		{"2 (kthreadd) S 0 0 0 0 -1 2129984 0 0", true},
		{"2 (kthreadd) S 1 0 0", false}, // a process named so, in a container
		{"2 (coily) S 1 2 2", false},
		{"", false}, // no pid 2: a container's PID namespace
		{"2 (kthreadd)", false},
	} {
		if got := initialPIDNamespace(func(string) string { return tc.stat }); got != tc.want {
			t.Errorf("%q: %v, want %v", tc.stat, got, tc.want)
		}
	}
}

// The path a container takes (bwrap started by unshare with a /proc of
// its own) runs on a host too when forced: the command runs, bwrap's
// status names the sandbox's own namespaces (read from pid 2 of the new
// /proc: without it, bwrap reads kthreadd's, or fails in a container), and
// a kill ends the sandbox before its gate opens.
func TestBwrapOwnProc(t *testing.T) {
	requireBwrapT(t)
	if _, err := UnsharePath(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	ownProcForced = true
	t.Cleanup(func() { ownProcForced = false })
	home := t.TempDir()
	if os.Geteuid() == 0 {
		if err := os.Chmod(home, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	p := Profile{Env: []string{"PATH=/usr/bin:/bin"}, Dir: "/", Home: home, Network: NetworkDeny}
	out, err := runWrapped(t, exec.Command("/bin/sh", "-c", "readlink /proc/self/ns/pid; echo $$"), p)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	lines := strings.Fields(out)
	if len(lines) != 2 || lines[1] == "1" {
		t.Fatalf("output %q: want the sandbox's pid namespace and a pid other than its init's", out)
	}

	// The status's namespaces are the command's own.
	cmd := exec.Command("/bin/sh", "-c", "readlink /proc/self/ns/pid")
	conf, err := (Bwrap{}).Wrap(context.Background(), cmd, p)
	if err != nil {
		t.Fatal(err)
	}
	defer conf.Close()
	if !conf.ownProc {
		t.Fatal("forced, the sandbox did not take the unshare path")
	}
	var buf strings.Builder
	cmd.Stdout, cmd.Stderr = &buf, &buf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	conf.AfterStart()
	// Read the first status line ourselves, as Start would.
	_ = conf.status.SetReadDeadline(time.Now().Add(30 * time.Second))
	var first map[string]any
	if err := json.NewDecoder(conf.status).Decode(&first); err != nil {
		t.Fatalf("status: %v", err)
	}
	conf.mu.Lock()
	conf.bwrap = cmd.Process // as Start records it
	conf.mu.Unlock()
	conf.Kill() // before the gate opens: the command never runs
	err = cmd.Wait()
	if buf.Len() != 0 || err == nil {
		t.Fatalf("killed before its gate: %q %v", buf.String(), err)
	}
	ns, ok := first["pid-namespace"].(float64)
	if !ok {
		t.Fatalf("status %v has no pid-namespace", first)
	}
	var self syscall.Stat_t
	if err := syscall.Stat("/proc/self/ns/pid", &self); err != nil {
		t.Fatal(err)
	}
	if uint64(ns) == self.Ino {
		t.Fatalf("status names this process's pid namespace %d: bwrap read the wrong /proc", self.Ino)
	}
	if kthreadd := nsOf(t, "/proc/2/ns/pid"); kthreadd != 0 && uint64(ns) == kthreadd {
		t.Fatalf("status names pid 2's namespace of this /proc (%d): bwrap read the host's /proc", kthreadd)
	}
}

func nsOf(t *testing.T, path string) uint64 {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return 0
	}
	return st.Ino
}
