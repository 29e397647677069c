package main

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"coily.dev/coily/internal/procs"
	"coily.dev/coily/internal/testserver"
	"coily.dev/coily/sandbox"
)

func requireBwrap(t testing.TB) {
	t.Helper()
	_, err := sandbox.BwrapPath()
	requireComponent(t, err == nil, "bubblewrap")
}

func TestCLISandboxCheck(t *testing.T) {
	requireBwrap(t)
	if r := runCoily(t, nil, "sandbox", "check"); r.code != 0 || !strings.Contains(r.stdout, "the sandbox works on this host") {
		t.Fatalf("sandbox check: %+v", r)
	}
	if r := runCoily(t, nil, "sandbox", "exec", "--", "/bin/sh", "-c", "echo out; exit 9"); r.code != 9 || r.stdout != "out\n" || r.stderr != "" {
		t.Fatalf("sandbox exec prints only the command's output and exits with its code: %+v", r)
	}
}

// In proxied mode the only way out is the proxy socket, reached through
// the bridge on the sandbox's loopback.
func TestCLISandboxProxied(t *testing.T) {
	requireBwrap(t)
	sock := filepath.Join(shortDir(t), "proxy.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	testserver.SandboxWorkspace(t, sock) // as root, the sandbox's user connects to it
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			buf := make([]byte, 64)
			n, _ := c.Read(buf)
			_, _ = c.Write(append([]byte("stub proxy got: "), buf[:n]...))
			c.Close()
		}
	}()
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer tcp.Close()
	script := `a=${HTTPS_PROXY#http://}; exec 3<>/dev/tcp/${a%:*}/${a##*:}; echo hello >&3; cat <&3; ` +
		`if (exec 4<>/dev/tcp/127.0.0.1/` + strconv.Itoa(tcp.Addr().(*net.TCPAddr).Port) + `) 2>/dev/null; then echo ESCAPED; fi`
	r := runCoily(t, nil, "sandbox", "exec", "--network", "proxied", "--proxy-socket", sock, "--", "/usr/bin/bash", "-c", script)
	if r.code != 0 || r.stdout != "stub proxy got: hello\n" {
		t.Fatalf("proxied: %+v", r)
	}
}

// findProcs returns the pids whose command line is exactly argv.
func findProcs(argv ...string) []int {
	want := strings.Join(argv, "\x00") + "\x00"
	return procs.Live(func(p procs.Proc) bool { return p.Cmdline == want })
}

func waitProcs(t *testing.T, within time.Duration, wantAlive bool, argv ...string) {
	t.Helper()
	deadline := time.Now().Add(within)
	for (len(findProcs(argv...)) > 0) != wantAlive {
		if time.Now().After(deadline) {
			t.Fatalf("after %s, %v alive = %v, want %v", within, argv, !wantAlive, wantAlive)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Nothing a sandboxed command starts outlives its request, or the server.
func TestCLISandboxedChildrenDieWithTheServer(t *testing.T) {
	requireBwrap(t)
	p := startServe(t, shortDir(t), examplePolicy(t))
	// A daemon (new session, in the background) dies with its request.
	if r := p.run(t, "exec", "--", "/bin/sh", "-c", "setsid sleep 3218 & echo started"); r.code != 0 {
		t.Fatalf("exec: %+v", r)
	}
	waitProcs(t, 5*time.Second, false, "sleep", "3218")

	// A running command and its daemon die when the server is killed.
	cmd := exec.Command(coilyBin, "--socket", p.socket, "exec", "--", "/bin/sh", "-c", "setsid sleep 3217 & sleep 3216")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	waitProcs(t, 10*time.Second, true, "sleep", "3216")
	waitProcs(t, 10*time.Second, true, "sleep", "3217")
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = p.cmd.Wait()
	waitProcs(t, 5*time.Second, false, "sleep", "3216")
	waitProcs(t, 5*time.Second, false, "sleep", "3217")
}

// The server killed (SIGKILL) while a command starts, 50 times at delays
// spread over the start: no process of the command survives it, whether
// the sandbox was being built, waiting at its start gate, or running.
func TestCLIServerKilledDuringStart(t *testing.T) {
	requireBwrap(t)
	dir := shortDir(t)
	for round := range 50 {
		p := startServe(t, dir, examplePolicy(t))
		marker := fmt.Sprintf("4000.%03d", round)
		client := exec.Command(coilyBin, "--socket", p.socket, "exec", "--", "/bin/sleep", marker)
		if err := client.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Duration(round%10) * 3 * time.Millisecond)
		if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		_ = p.cmd.Wait()
		_ = client.Wait()
		// bwrap's command line ends with the command's: nothing naming the
		// marker may be left, bwrap itself included.
		deadline := time.Now().Add(5 * time.Second)
		for len(procsNaming(marker)) > 0 {
			if time.Now().After(deadline) {
				t.Fatalf("round %d: survivors %v", round, procsNaming(marker))
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// procsNaming returns the live processes whose command line holds s as
// one of its arguments.
func procsNaming(s string) []int {
	return procs.Live(func(p procs.Proc) bool { return strings.Contains("\x00"+p.Cmdline, "\x00"+s+"\x00") })
}

// The server's own files outside its state directory — the policy it runs
// under, the credentials file — are hidden from every command, even when
// the owner put them inside a workspace: a command that could rewrite the
// policy would reload its own rules, one that could read the credentials
// file would hold every secret.
func TestCLISandboxHidesServerFiles(t *testing.T) {
	requireBwrap(t)
	ws := t.TempDir()
	testserver.SandboxWorkspace(t, ws) // before the server's files are put there: they stay root's
	polPath, credPath := filepath.Join(ws, "policy.yaml"), filepath.Join(ws, "creds")
	pol := fmt.Sprintf(`version: 1
workspaces: {ws: %s}
roles: {operator: {permissions: [exec], commands: ["*"]}}
commands:
  - {name: sh, binary: /bin/sh, args: ["**"], flags: any, workspace: ws}
`, ws)
	if err := os.WriteFile(polPath, []byte(pol), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(credPath, []byte("demo=CREDENTIAL-AT-REST\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startServe(t, shortDir(t), polPath, "--credentials-file", credPath)
	r := p.run(t, "exec", "--", "/bin/sh", "-c", "cat policy.yaml creds; echo '# rewritten' >> policy.yaml; echo x > creds; echo done")
	if strings.Contains(r.stdout, "workspaces") || strings.Contains(r.stdout, "CREDENTIAL-AT-REST") {
		t.Fatalf("a command read the server's files: %q", r.stdout)
	}
	if !strings.Contains(r.stdout, "done") {
		t.Fatalf("exec: %+v", r)
	}
	if b, _ := os.ReadFile(polPath); string(b) != pol {
		t.Fatalf("the policy was rewritten: %q", b)
	}
	if b, _ := os.ReadFile(credPath); string(b) != "demo=CREDENTIAL-AT-REST\n" {
		t.Fatalf("the credentials file was rewritten: %q", b)
	}
}

// --sandbox-user: as root, every sandbox runs as the user named (default
// nobody), never root; bad values (root, group 0, unknown, malformed) stop
// serve, dev and sandbox exec before anything runs. A process not running
// as root refuses the flag: its sandboxes run as itself.
func TestCLISandboxUserFlag(t *testing.T) {
	requireBwrap(t)
	bad := []string{"root", "0", "no-such-user-coily", "12ab", "-1", ""}
	if os.Geteuid() != 0 {
		bad = []string{"nobody", "4242"}
	}
	for _, v := range bad {
		for _, args := range [][]string{
			{"sandbox", "exec", "--sandbox-user", v, "--", "/bin/true"},
			{"serve", "--state-dir", shortDir(t), "--policy", examplePolicy(t), "--sandbox-user", v},
		} {
			if v == "" {
				continue // empty: the default
			}
			r := runCoily(t, nil, args...)
			if r.code != 2 || !strings.Contains(r.stderr, "sandbox") {
				t.Errorf("%q: %+v", args, r)
			}
		}
	}
	want := strconv.Itoa(os.Geteuid()) + "\n"
	if os.Geteuid() == 0 {
		want = strconv.Itoa(sandbox.DefaultUser().UID) + "\n"
		if r := runCoily(t, nil, "sandbox", "exec", "--sandbox-user", "4242", "--", "/usr/bin/id", "-u"); r.code != 0 || r.stdout != "4242\n" {
			t.Errorf("--sandbox-user 4242: %+v", r)
		}
	}
	if r := runCoily(t, nil, "sandbox", "exec", "--", "/usr/bin/id", "-u"); r.code != 0 || r.stdout != want {
		t.Errorf("default sandbox user: %+v, want %q", r, want)
	}
}
