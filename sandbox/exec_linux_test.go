package sandbox

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// runWrapped runs cmd under p with bwrap and returns its output, and the
// sandbox's set-up error if it could not run it.
func runWrapped(t *testing.T, cmd *exec.Cmd, p Profile) (string, error) {
	t.Helper()
	conf, err := (Bwrap{}).Wrap(context.Background(), cmd, p)
	if err != nil {
		t.Fatal(err)
	}
	defer conf.Close()
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	conf.AfterStart()
	startErr := conf.Start(context.Background(), cmd.Process)
	if startErr != nil {
		t.Logf("start: %v", startErr)
		conf.Signal(syscall.SIGKILL) // the gate stays shut: nothing else ends it
	}
	_ = cmd.Wait()
	if err := conf.Setup([]byte(out.String())); err != nil {
		return out.String(), err
	}
	return out.String(), startErr
}

// A program is run from the file that was opened (and hashed), never from
// what its path holds by the time the sandbox starts: unchanged, the
// opened file runs; replaced, the sandbox refuses to start (bubblewrap
// cannot bind a file that is no longer linked) rather than run the new
// one.
func TestBwrapRunsTheOpenedFile(t *testing.T) {
	if _, err := BwrapPath(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	dir := t.TempDir()
	home := t.TempDir()
	if os.Geteuid() == 0 {
		// bubblewrap runs as the sandbox's user and reaches the program
		// by path: the test's temporary directory must let it through.
		if err := os.Chmod(filepath.Dir(dir), 0o711); err != nil {
			t.Fatal(err)
		}
	}
	prog := filepath.Join(dir, "prog")
	data, err := os.ReadFile("/bin/echo")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(prog, data, 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(prog)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	p := Profile{Env: []string{"PATH=/usr/bin:/bin"}, Dir: home, Home: home, Network: NetworkDeny, Exec: f, ExecPath: prog}
	if out, err := runWrapped(t, exec.Command(prog, "original"), p); err != nil || out != "original\n" {
		t.Fatalf("unchanged: %q %v", out, err)
	}
	// Swapped after the check: a script at the same path.
	swapped := filepath.Join(dir, "swapped")
	if err := os.WriteFile(swapped, []byte("#!/bin/sh\necho SWAPPED\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(swapped, prog); err != nil {
		t.Fatal(err)
	}
	out, err := runWrapped(t, exec.Command(prog, "original"), p)
	if strings.Contains(out, "SWAPPED") || err == nil && out != "original\n" {
		t.Fatalf("swapped: ran %q (%v)", out, err)
	}
	// Without the opened file, the path's current content runs: what the
	// server never does.
	p.Exec, p.ExecPath = nil, ""
	p.ReadPaths = []string{dir}
	if out, err := runWrapped(t, exec.Command(prog, "original"), p); out != "SWAPPED\n" {
		t.Fatalf("by path: %q %v", out, err)
	}
}

// bubblewrap reaches the proxy through the unix socket it bridges into
// the namespace: a loopback address alone (sandbox-exec's way) is refused
// before anything is set up.
func TestBwrapProxiedNeedsTheSocket(t *testing.T) {
	cmd := exec.Command("/bin/true")
	b := Bwrap{Path: "/bin/true", Bridge: "/bin/true"} // never run: refused first
	_, err := b.Wrap(context.Background(), cmd, Profile{Dir: "/", Home: "/tmp", Network: NetworkProxied, ProxyAddr: "127.0.0.1:3128"})
	if err == nil || !strings.Contains(err.Error(), "unix socket") {
		t.Fatalf("proxied with only ProxyAddr: %v", err)
	}
	if cmd.Path != "/bin/true" || len(cmd.Args) != 1 {
		t.Fatalf("the command was rewritten: %q", cmd.Args)
	}
}

// A root caller's sandbox runs as the sandbox user (DefaultUser when the
// profile names none) with no supplementary groups and no capabilities;
// an unprivileged caller's as itself. Nothing else changes: no_new_privs
// and seccomp as always.
func TestBwrapRunsAsSandboxUser(t *testing.T) {
	if _, err := BwrapPath(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	home := t.TempDir()
	p := Profile{Env: []string{"PATH=/usr/bin:/bin"}, Dir: home, Home: home, Network: NetworkDeny}
	out, err := runWrapped(t, exec.Command("/bin/cat", "/proc/self/status"), p)
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	uid, gid := os.Geteuid(), os.Getegid()
	if uid == 0 {
		u := DefaultUser()
		uid, gid = u.UID, u.GID
	}
	field := func(name string) string {
		for _, line := range strings.Split(out, "\n") {
			if v, ok := strings.CutPrefix(line, name+":"); ok {
				return strings.Join(strings.Fields(v), " ")
			}
		}
		return "<missing>"
	}
	ids := func(n int) string { s := strconv.Itoa(n); return s + " " + s + " " + s + " " + s }
	want := map[string]string{"Uid": ids(uid), "Gid": ids(gid), "CapEff": "0000000000000000", "CapPrm": "0000000000000000",
		"NoNewPrivs": "1", "Seccomp": "2"}
	if os.Geteuid() == 0 {
		want["Groups"] = ""
	}
	for name, w := range want {
		if got := field(name); got != w {
			t.Errorf("%s: %q, want %q", name, got, w)
		}
	}
	if os.Geteuid() == 0 {
		// A named user, as --sandbox-user gives it.
		p.User = User{Name: "x", UID: 4242, GID: 4343}
		out, err := runWrapped(t, exec.Command("/usr/bin/id"), p)
		if err != nil || !strings.Contains(out, "uid=4242") || !strings.Contains(out, "gid=4343") {
			t.Errorf("as uid 4242: %q %v", out, err)
		}
		p.User = User{UID: 0, GID: 4343}
		if _, err := (Bwrap{}).Wrap(context.Background(), exec.Command("/bin/true"), p); err == nil {
			t.Error("root as the sandbox user was accepted")
		}
	}
}
