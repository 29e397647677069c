//go:build coilydev

package main

import (
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"coily.dev/coily/client/tsnode"
	"coily.dev/coily/internal/devnet"
)

var (
	coilyClientOnce sync.Once
	coilyClientBin  string
	coilyClientErr  error
)

// buildCoilyClient builds the lean client, coily-client, as
// scripts/release.sh does, into a directory of its own.
func buildCoilyClient(t testing.TB) string {
	t.Helper()
	coilyClientOnce.Do(func() {
		dir, err := os.MkdirTemp("", "coily-client-bin-")
		if err != nil {
			coilyClientErr = err
			return
		}
		coilyClientBin = filepath.Join(dir, "coily-client")
		if prebuilt := os.Getenv("COILY_TEST_COILY_CLIENT"); prebuilt != "" {
			coilyClientErr = copyExecutable(prebuilt, coilyClientBin)
			return
		}
		build := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", coilyClientBin, "../coily-client")
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := build.CombinedOutput(); err != nil {
			coilyClientErr = errors.New(string(out))
		}
	})
	if coilyClientErr != nil {
		t.Fatalf("build coily-client: %v", coilyClientErr)
	}
	return coilyClientBin
}

// layout is a new directory holding the binaries named (coily-exec,
// coily-client, coily: the development build under test).
func layout(t *testing.T, names ...string) string {
	dir := t.TempDir()
	for _, name := range names {
		from := coilyBin
		switch name {
		case "coily-exec":
			from = buildCoilyExec(t)
		case "coily-client":
			from = buildCoilyClient(t)
		}
		if err := linkOrCopy(from, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// cleanEnv is a client's environment without any COILY_* setting of the
// test's own, plus extra.
func cleanEnv(extra ...string) []string {
	env := []string{"PATH=/usr/bin:/bin"}
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "HOME=") || strings.HasPrefix(kv, "TMPDIR=") {
			env = append(env, kv)
		}
	}
	return append(append(env, devnet.OfflineEnv()...), extra...)
}

// TestShimUnderCoilyDev: the shims made by default are links to
// coily-exec, which sits beside coily-client and coily (as the release
// installs them; coily here the development build); under `coily dev`
// (COILY_DEV set) a shim's command runs on
// the dev server over its tailnet and its output comes back, as the tag
// COILY_DEV_AS names (a stranger is refused, which the local operator
// socket would not be). Before the one client stack, coily-exec ignored
// COILY_DEV: it handed the command to coily-client, which failed with
// "server unreachable".
func TestShimUnderCoilyDev(t *testing.T) {
	requireBwrap(t)
	bin := layout(t, "coily-exec", "coily-client", "coily")
	fast := filepath.Join(bin, "coily-exec")
	dir := shortDir(t)
	startDev(t, dir, "--state-dir", dir)
	shims := filepath.Join(t.TempDir(), "shims")
	if r := runWith(t, cleanEnv(), nil, filepath.Join(bin, "coily"), "shim", "install", "--dir", shims, "echo"); r.code != 0 ||
		!strings.Contains(r.stdout, filepath.Join(shims, "echo")+" -> "+fast) {
		t.Fatalf("shim install: %+v", r)
	}
	// env(1) finds echo on PATH: the shell's builtin would not.
	env := cleanEnv("PATH="+shims+":/usr/bin:/bin", "COILY_DEV="+dir)
	if r := runWith(t, env, nil, "/usr/bin/env", "echo", "through the dev tailnet"); r.code != 0 || r.stdout != "through the dev tailnet\n" {
		t.Fatalf("echo -> coily-exec under coily dev: %+v", r)
	}
	if r := runWith(t, append(env, "COILY_DEV_AS=stranger"), nil, "/usr/bin/env", "echo", "hi"); r.code != 125 || !strings.Contains(r.stderr, "(permission-denied)") {
		t.Fatalf("echo -> coily-exec as tag:stranger: %+v", r)
	}
}

// TestEveryClientHonoursSettings: every binary asks the one resolver
// (client.Settings.Where, TestWhere) where the server is, so each setting
// is honoured by each binary, by a real run against `coily dev`: the full
// coily, the lean coily-client, and coily-exec (the shims' client) beside
// coily-client alone or beside both. Where a setting names a route other than the local socket, the
// socket named by COILY_SOCKET is a dead one, so an answer proves the
// route was taken; a route a binary has no transport for is refused (exit
// 2), never taken for the local socket.
func TestEveryClientHonoursSettings(t *testing.T) {
	requireBwrap(t)
	lean := layout(t, "coily-exec", "coily-client")          // agents' machines
	full := layout(t, "coily-exec", "coily-client", "coily") // as the release installs them
	dir := shortDir(t)
	startDev(t, dir, "--state-dir", dir)
	info, err := tsnode.ReadDevInfo(dir)
	if err != nil {
		t.Fatal(err)
	}
	proxy := socketProxy(t, filepath.Join(dir, "coily.sock"))
	dead := "COILY_SOCKET=" + filepath.Join(dir, "nobody.sock")

	const ok = "hi\n"
	type want struct {
		code int
		out  string // stdout, or a part of stderr when code is not 0
	}
	binaries := []struct {
		name string
		argv []string
	}{
		{"coily", []string{coilyBin, "exec", "--"}},
		{"coily-client", []string{filepath.Join(lean, "coily-client"), "exec", "--"}},
		{"coily-exec beside coily-client", []string{filepath.Join(lean, "coily-exec")}},
		{"coily-exec beside coily-client and coily", []string{filepath.Join(full, "coily-exec")}},
	}
	for _, tc := range []struct {
		setting string
		env     []string
		want    []want // by binary
	}{
		{"COILY_SOCKET", []string{"COILY_SOCKET=" + filepath.Join(dir, "coily.sock")},
			[]want{{0, ok}, {0, ok}, {0, ok}, {0, ok}}},
		{"COILY_STATE_DIR", []string{"COILY_STATE_DIR=" + dir},
			[]want{{0, ok}, {0, ok}, {0, ok}, {0, ok}}},
		{"COILY_SERVER", []string{dead, "COILY_SERVER=" + proxy},
			[]want{{0, ok}, {0, ok}, {0, ok}, {0, ok}}},
		{"COILY_DEV", []string{dead, "COILY_DEV=" + dir},
			[]want{{0, ok}, {2, "COILY_DEV is set"}, {2, "COILY_DEV is set"}, {0, ok}}},
		// A node of its own joins as no tag: the dev policy grants it
		// nothing, which proves the call went over the tailnet.
		{"COILY_TSNET", []string{dead, "COILY_TSNET=1", "COILY_SERVER=" + info.Server, "COILY_CONTROL_URL=" + info.ControlURL,
			"COILY_TSNET_STATE=" + t.TempDir()},
			[]want{{125, "(permission-denied)"}, {2, "COILY_TSNET is set"}, {2, "COILY_TSNET is set"}, {125, "(permission-denied)"}}},
	} {
		for i, b := range binaries {
			t.Run(tc.setting+"/"+b.name, func(t *testing.T) {
				argv := append(append([]string{}, b.argv...), "/bin/echo", "hi")
				r := runWith(t, cleanEnv(tc.env...), nil, argv[0], argv[1:]...)
				w := tc.want[i]
				if r.code != w.code || w.code == 0 && r.stdout != w.out || w.code != 0 && !strings.Contains(r.stderr, w.out) {
					t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit %d and %q", tc.env, r.code, r.stdout, r.stderr, w.code, w.out)
				}
			})
		}
	}
}

// socketProxy relays TCP connections on a loopback port to the unix
// socket sock, standing in for a server on the tailnet (COILY_SERVER,
// reached without tailscaled by the name's address); it returns
// HOST:PORT.
func socketProxy(t *testing.T, sock string) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				s, err := net.Dial("unix", sock)
				if err != nil {
					return
				}
				defer s.Close()
				go func() { _, _ = io.Copy(s, c); _ = s.(*net.UnixConn).CloseWrite() }()
				_, _ = io.Copy(c, s)
			}()
		}
	}()
	return ln.Addr().String()
}
