package deploy

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"coily.dev/coily/internal/poll"
	"coily.dev/coily/internal/testlog"
)

// A policy an admin might write after installing: operators may run echo.
const echoPolicy = `version: 1
local_operators:
  users: []
  groups: [coily-ops]
roles:
  operator:
    permissions: [exec, lockout, unlock, pause, resume, status]
    commands: [echo]
commands:
  - name: echo
    binary: /bin/echo
    args: ["**"]
    flags: any
`

// unitService reads the [Service] section of a unit: key to values.
func unitService(unit string) map[string][]string {
	keys := map[string][]string{}
	section := ""
	for line := range strings.Lines(unit) {
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' || line[0] == ';' {
			continue
		}
		if line[0] == '[' {
			section = line
			continue
		}
		if k, v, ok := strings.Cut(line, "="); ok && section == "[Service]" {
			keys[k] = append(keys[k], v)
		}
	}
	return keys
}

// envFile reads an EnvironmentFile's NAME=value lines (no quoting in ours).
func envFile(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var env []string
	for line := range strings.Lines(string(b)) {
		line = strings.TrimSpace(line)
		if line != "" && line[0] != '#' {
			env = append(env, line)
		}
	}
	return env
}

// waitFor polls cond until it holds, failing the test with the server's
// log after d.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool, log *testlog.Buffer) {
	t.Helper()
	if !poll.Within(d, cond) {
		t.Fatalf("%s: not within %v; server log:\n%s", what, d, log.String())
	}
}

// serveInRoot runs the installed unit's ExecStart as systemd would — as
// its User= and Group=, with its UMask= and EnvironmentFile=, PATH as
// systemd sets it — in a container on root (testdata/container.sh), less
// --tailnet (there is no tailnet here). From the host it asks for the
// status over the socket, installs a policy as an admin would, runs a
// sandboxed command, locks out, and stops the server with SIGTERM. It
// returns the SHA-256 of each state file the run left.
func serveInRoot(t *testing.T, root, unit string, gid int) map[string]string {
	t.Helper()
	svc := unitService(unit)
	for k, v := range map[string]string{"User": "coily", "Group": "coily", "UMask": "0077", "EnvironmentFile": "/etc/coily/coily.env"} {
		if len(svc[k]) != 1 || svc[k][0] != v {
			t.Fatalf("installed unit: %s=%q, want %s", k, svc[k], v)
		}
	}
	if len(svc["ExecStart"]) != 1 {
		t.Fatalf("installed unit: ExecStart=%q", svc["ExecStart"])
	}
	var argv []string
	for _, f := range strings.Fields(svc["ExecStart"][0]) {
		if f != "--tailnet" {
			argv = append(argv, f)
		}
	}
	if argv[0] != "/usr/bin/coily" || argv[1] != "serve" {
		t.Fatalf("installed unit: ExecStart=%s, want /usr/bin/coily serve", svc["ExecStart"][0])
	}
	container, err := filepath.Abs(filepath.Join("testdata", "container.sh"))
	if err != nil {
		t.Fatal(err)
	}
	args := append([]string{"--mount", container, root,
		"/usr/bin/setpriv", "--reuid=" + svc["User"][0], "--regid=" + svc["Group"][0], "--init-groups", "--",
		"/bin/sh", "-c", `umask "$0" && exec "$@"`, svc["UMask"][0]}, argv...)
	cmd := exec.Command("unshare", args...)
	cmd.Env = append([]string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
		envFile(t, filepath.Join(root, "etc/coily/coily.env"))...)
	log := &testlog.Buffer{}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			cmd.Process.Kill()
			<-done
		}
	})
	exited := func() bool {
		select {
		case err := <-done:
			stopped = true
			t.Fatalf("the server exited: %v\n%s", err, log.String())
		default:
		}
		return false
	}

	sock := filepath.Join(root, "var/lib/coily/coily.sock")
	waitFor(t, 30*time.Second, "the socket", func() bool {
		fi, err := os.Stat(sock)
		return err == nil && fi.Mode()&os.ModeSocket != 0 || exited()
	}, log)
	client := func(args ...string) (string, int) {
		c := exec.Command(filepath.Join(root, "usr/bin/coily"), append([]string{"--socket", sock}, args...)...)
		out, err := c.CombinedOutput()
		code := 0
		if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return string(out), code
	}
	out, code := client("status")
	for _, want := range []string{"server:      coily " + testVersion, "roles:       operator", "lockout:     off"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("coily status (exit %d):\n%s\nwant %q", code, out, want)
		}
	}

	// An admin allows a command: the new policy, root's and readable by
	// group coily as the package made it, replaces the old one.
	policy := filepath.Join(root, "etc/coily/policy.yaml")
	tmp := policy + ".new"
	writeFile(t, tmp, echoPolicy)
	if err := os.Chown(tmp, 0, gid); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(tmp, 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, policy); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte(echoPolicy))
	waitFor(t, 10*time.Second, "the policy reload", func() bool {
		out, _ := client("status")
		return strings.Contains(out, hex.EncodeToString(sum[:6])) || exited()
	}, log)
	// The command runs in bubblewrap, as coily, on the installed system.
	if out, code := client("exec", "--", "/bin/echo", "hello from the package"); code != 0 || out != "hello from the package\n" {
		t.Errorf("coily exec -- /bin/echo: exit %d, %q\nserver log:\n%s", code, out, log.String())
	}
	if out, code := client("lockout", "--reason", "package test"); code != 0 {
		t.Errorf("coily lockout: exit %d\n%s", code, out)
	}
	if out, code := client("exec", "--", "/bin/echo", "after the lockout"); code != 125 || !strings.Contains(out, "lockout-active") {
		t.Errorf("coily exec after a lockout: exit %d, %q; want 125 lockout-active", code, out)
	}

	// systemctl stop: SIGTERM; the unit gives it TimeoutStopSec.
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	timeout := 20 * time.Second
	if v := svc["TimeoutStopSec"]; len(v) == 1 {
		if n, err := strconv.Atoi(v[0]); err == nil {
			timeout = time.Duration(n) * time.Second
		}
	}
	select {
	case err := <-done:
		stopped = true
		if err != nil {
			t.Errorf("the server exited with %v after SIGTERM\n%s", err, log.String())
		}
	case <-time.After(timeout):
		t.Fatalf("the server did not stop within TimeoutStopSec=%v\n%s", timeout, log.String())
	}
	if !strings.Contains(log.String(), "msg=serving") {
		t.Errorf("server log:\n%s\nwant msg=serving", log.String())
	}
	if _, err := os.Lstat(sock); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the socket after a clean stop: %v, want it removed", err)
	}

	// What the server left, owned by coily, and an audit log that verifies.
	users := ids(t, filepath.Join(root, "etc", "passwd"))
	coily := owner{atoi(t, users["coily"][2]), gid}
	// The state directory is the operators' group's to traverse (the
	// socket's, --socket-group coily-ops), not the service group's.
	ops := owner{coily.uid, atoi(t, ids(t, filepath.Join(root, "etc", "group"))["coily-ops"][2])}
	checkFile(t, filepath.Join(root, "var/lib/coily"), true, 0o710, ops)
	checkFile(t, filepath.Join(root, "var/lib/coily/coily.db"), false, 0o600, coily)
	checkFile(t, filepath.Join(root, "var/lib/coily/audit"), true, 0o700, coily)
	logs, err := filepath.Glob(filepath.Join(root, "var/lib/coily/audit/*.jsonl"))
	if err != nil || len(logs) != 1 {
		t.Fatalf("audit log files: %q %v", logs, err)
	}
	checkFile(t, logs[0], false, 0o600, coily)
	if out := mustInRoot(t, root, "coily", "audit", "verify", "--state-dir", "/var/lib/coily"); !strings.Contains(out, "audit log OK") {
		t.Errorf("coily audit verify: %s", out)
	}
	state := map[string]string{}
	for _, p := range []string{filepath.Join(root, "var/lib/coily/coily.db"), logs[0]} {
		rel, _ := filepath.Rel(root, p)
		state[rel] = fileSHA256(t, p)
	}
	return state
}

var exposureRE = regexp.MustCompile(`Overall exposure level for coily\.service: ([0-9.]+)`)

// exposure reads systemd-analyze security's overall level.
func exposure(out []byte) (float64, bool) {
	m := exposureRE.FindSubmatch(out)
	if m == nil {
		return 0, false
	}
	f, err := strconv.ParseFloat(string(m[1]), 64)
	return f, err == nil
}
