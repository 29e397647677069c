package server_test

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"coily.dev/coily/internal/testserver"
	"coily.dev/coily/sandbox"
)

// requireBwrap fails under CI=true (which installs bubblewrap) and skips
// elsewhere when bwrap is missing.
func requireBwrap(t *testing.T) {
	t.Helper()
	if _, err := sandbox.BwrapPath(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("bubblewrap is required under CI=true: %v", err)
		}
		t.Skip(err)
	}
}

// sandboxedHome sets up a home for the server's user with secrets in it,
// and inside it the rule's workspace (a home itself is no workspace) with
// a git repository with hooks, a planted symlink out, a host unix socket,
// and the probe binary.
func sandboxedHome(t *testing.T, stateDir string) (home, ws, sock string) {
	t.Helper()
	home = t.TempDir()
	t.Setenv("HOME", home)
	ws = filepath.Join(home, "work")
	for path, content := range map[string]string{
		".ssh/id_ed25519":      "SECRET-SSH-KEY",
		".aws/credentials":     "SECRET-AWS-KEY",
		".config/gh/hosts.yml": "SECRET-GH-TOKEN",
		"work/repo/README":     "hello",
	} {
		full := filepath.Join(home, path)
		if err := os.MkdirAll(filepath.Dir(full), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := exec.Command("git", "init", "-q", filepath.Join(ws, "repo")).CombinedOutput(); err != nil {
		t.Fatalf("git init: %v %s", err, out)
	}
	if err := os.Symlink(stateDir, filepath.Join(ws, "escape")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(home, ".ssh"), filepath.Join(ws, "ssh-link")); err != nil {
		t.Fatal(err)
	}
	buildProbe(t, ws)
	sock = filepath.Join(ws, "agent.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	testserver.SandboxWorkspace(t, ws)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	return home, ws, sock
}

func TestSandboxEscapeBattery(t *testing.T) {
	requireBwrap(t)
	stateDir, err := os.MkdirTemp("", "coily-sbx-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(stateDir) })
	home, ws, agentSock := sandboxedHome(t, stateDir)
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer tcp.Close()
	in := testserver.Start(t, testserver.Options{StateDir: stateDir, Policy: fmt.Sprintf(`version: 1
limits: {concurrency: 4}
workspaces: {work: %s}
roles: {operator: {permissions: [exec, lockout, unlock, pause, resume, status], commands: ["*"]}}
commands:
  - {name: sh, binary: /bin/sh, args: ["**"], flags: any, sandbox: bwrap, workspace: work}
`, ws)})
	hostTmp := "coily-escape-" + filepath.Base(ws)
	escapes := []struct {
		name, script string
	}{
		{"read ~/.ssh", "cat " + home + "/.ssh/id_ed25519"},
		{"list ~/.ssh", "ls " + home + "/.ssh | grep id_"},
		{"read ~/.ssh through a link in the workspace", "cat ssh-link/id_ed25519"},
		{"read ~/.aws", "cat " + home + "/.aws/credentials"},
		{"read ~/.config/gh", "cat " + home + "/.config/gh/hosts.yml"},
		{"read the server's state directory", "cat " + stateDir + "/coily.db >/dev/null && ls " + stateDir + " | grep audit"},
		{"read the audit log", "cat " + stateDir + "/audit/*.jsonl"},
		{"write /usr", "touch /usr/coily-escape"},
		{"write /etc", "touch /etc/coily-escape"},
		{"write .git/hooks", "echo evil > repo/.git/hooks/pre-commit"},
		{"write .git/config", "echo '[core] hooksPath=/tmp' >> repo/.git/config"},
		{"TCP to the host's loopback in deny mode", "./probe tcp " + tcp.Addr().String()},
		{"connect to a host unix socket in the workspace", "./probe unix " + agentSock},
		{"connect to coily's own socket", "./probe unix " + in.Socket},
		{"ptrace another process", "sleep 5 & ./probe ptrace $!"},
		{"see host processes", fmt.Sprintf("test -e /proc/%d/status && grep -q server.test /proc/%d/cmdline", os.Getpid(), os.Getpid())},
		{"follow a planted symlink out of the workspace", "cat escape/coily.db > /dev/null"},
		{"new user namespace", "unshare -U true"},
	}
	for _, e := range escapes {
		t.Run(e.name, func(t *testing.T) {
			r := execArgv(t, in, "/bin/sh", "-c", e.script)
			if r.err != nil {
				t.Fatalf("refused instead of run: %v", r.err)
			}
			if r.exit.GetExitCode() == 0 {
				t.Fatalf("escape succeeded: stdout %q stderr %q", r.stdout, r.stderr)
			}
			if strings.Contains(r.stdout+r.stderr, "SECRET-") {
				t.Fatalf("secret visible: %q %q", r.stdout, r.stderr)
			}
		})
	}
	// /tmp is private: a file written there never reaches the host.
	if r := execArgv(t, in, "/bin/sh", "-c", "touch /tmp/"+hostTmp); r.err != nil || r.exit.GetExitCode() != 0 {
		t.Fatalf("private /tmp: %+v", r)
	}
	if _, err := os.Stat("/tmp/" + hostTmp); err == nil {
		os.Remove("/tmp/" + hostTmp)
		t.Fatal("a file written to the sandbox's /tmp appeared on the host")
	}

	legit := []struct{ name, script, want string }{
		{"read /usr", "ls /usr/bin | grep -c . >/dev/null && echo ok", "ok\n"},
		{"write the workspace", "echo written > out.txt && cat out.txt", "written\n"},
		{"git status in a workspace repository", "cd repo && git status --short && echo clean", "?? README\nclean\n"},
		{"resolve a name from /etc/hosts", "getent hosts localhost | grep -q . && echo resolved", "resolved\n"},
		{"see only its own processes", "ls /proc | grep -c '^[0-9]' | awk '$1 < 10 {print \"few\"}'", "few\n"},
	}
	for _, l := range legit {
		t.Run(l.name, func(t *testing.T) {
			r := execArgv(t, in, "/bin/sh", "-c", l.script)
			if r.err != nil || r.exit.GetExitCode() != 0 || r.stdout != l.want {
				t.Fatalf("stdout %q stderr %q err %v exit %d", r.stdout, r.stderr, r.err, r.exit.GetExitCode())
			}
		})
	}
	if data, err := os.ReadFile(filepath.Join(ws, "out.txt")); err != nil || string(data) != "written\n" {
		t.Fatalf("workspace write did not reach the host: %q %v", data, err)
	}
	if data, _ := os.ReadFile(filepath.Join(ws, "repo/.git/config")); strings.Contains(string(data), "hooksPath") {
		t.Fatal(".git/config was changed")
	}
}

// A rule whose sandbox cannot run here is refused, never run unconfined;
// the environment is rebuilt without socket-bearing variables.
func TestSandboxFailsClosedAndEnvIsRebuilt(t *testing.T) {
	requireBwrap(t)
	t.Setenv("SSH_AUTH_SOCK", "/tmp/agent.sock")
	t.Setenv("DBUS_SESSION_BUS_ADDRESS", "unix:path=/run/user/0/bus")
	t.Setenv("TZ", "Europe/Paris")
	in := testserver.Start(t, testserver.Options{Policy: `version: 1
limits: {concurrency: 4}
roles: {operator: {permissions: [exec], commands: ["*"]}}
commands:
  - {name: mac-only, binary: /bin/sh, flags: {-c: "touch *"}, sandbox: sandbox-exec}
  - {name: env, binary: /usr/bin/env, sandbox: bwrap}
`})
	marker := filepath.Join(in.StateDir, "ran-unconfined")
	r := execArgv(t, in, "/bin/sh", "-c", "touch "+marker)
	wantCode(t, r.err, "sandbox-unavailable")
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the command ran although its sandbox was unavailable")
	}
	r = execArgv(t, in, "/usr/bin/env")
	if r.err != nil {
		t.Fatal(r.err)
	}
	for _, leak := range []string{"SSH_AUTH_SOCK", "DBUS_SESSION_BUS_ADDRESS", "COILY_"} {
		if strings.Contains(r.stdout, leak) {
			t.Errorf("%s reached the command:\n%s", leak, r.stdout)
		}
	}
	if !strings.Contains(r.stdout, "TZ=Europe/Paris\n") || !strings.Contains(r.stdout, "PATH=") {
		t.Errorf("allowed variables missing:\n%s", r.stdout)
	}
}
