package main

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"coily.dev/coily/internal/devnet"
	"coily.dev/coily/internal/headscaletest"
)

// sshTailnetPolicy is headscale's policy for the Tailscale SSH test: the
// operators' user (ops) may reach the trust point's host (tag:coily-host)
// on port 22 and log in there, by Tailscale SSH, as the logins named by
// %[1]q (the operator, after a fresh check: headscale holds the session
// until its administrator approves) and %[2]q (a login outside the
// socket's group), and as nothing else (root included).
const sshTailnetPolicy = `{
  "tagOwners": {"tag:coily-host": []},
  "grants": [{"src": ["ops@"], "dst": ["tag:coily-host"], "ip": ["tcp:22"]}],
  "ssh": [{"action": "check", "src": ["ops@"], "dst": ["tag:coily-host"], "users": [%[1]q]},
          {"action": "accept", "src": ["ops@"], "dst": ["tag:coily-host"], "users": [%[2]q]}]
}`

// sshCoilyPolicy is the trust point's: members of the operators' group
// %[1]q are local operators; a sandboxed sleep for the command the
// lockout must kill.
const sshCoilyPolicy = `version: 1
local_operators: {groups: [%[1]s]}
roles:
  operator: {permissions: [exec], commands: [sleep]}
commands:
  - {name: sleep, binary: /bin/sleep, args: ["**"], sandbox: bwrap, timeout: 5m}
`

// localLogins creates a group and two logins on this host for the test
// (one in the group, one not) and removes them at its cleanup. Names carry
// a random suffix: a login left by a killed run never collides.
func localLogins(t *testing.T) (group, operator, guest string) {
	t.Helper()
	for _, tool := range []string{"useradd", "userdel", "groupadd", "groupdel"} {
		_, err := exec.LookPath(tool)
		requireComponent(t, err == nil, tool)
	}
	var b [3]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	sfx := hex.EncodeToString(b[:])
	group, operator, guest = "cops"+sfx, "cop"+sfx, "cguest"+sfx
	mustRun(t, "groupadd", group)
	t.Cleanup(func() { cleanupRun(t, "groupdel", group) })
	for _, u := range []struct{ name, group string }{{operator, group}, {guest, ""}} {
		args := []string{"--create-home", "--shell", "/bin/sh"}
		if u.group != "" {
			args = append(args, "--groups", u.group)
		}
		mustRun(t, "useradd", append(args, u.name)...)
		name := u.name
		t.Cleanup(func() { cleanupRun(t, "userdel", "--remove", name) })
	}
	return group, operator, guest
}

func mustRun(t *testing.T, name string, args ...string) {
	t.Helper()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %v: %v\n%s", name, args, err, out)
	}
}

// cleanupRun runs a cleanup command; userdel warns (exit 12) when the
// mail spool it would remove does not exist, which is not a failure.
func cleanupRun(t *testing.T, name string, args ...string) {
	out, err := exec.Command(name, args...).CombinedOutput()
	var ee *exec.ExitError
	if err != nil && !(errors.As(err, &ee) && ee.ExitCode() == 12) {
		t.Errorf("%s %v: %v\n%s", name, args, err, out)
	}
}

// sshRun is `tailscale ssh LOGIN@coily-host REMOTE...` from the
// operator's node, as the runbook has it.
func sshRun(t *testing.T, ops *osNode, login string, remote ...string) cliRun {
	t.Helper()
	return sshRunChecked(t, ops, nil, login, remote...)
}

// checkURL is the line headscale's check action has Tailscale SSH print.
var checkURL = regexp.MustCompile(`To authenticate, visit: \S+/auth/(\S+)`)

// sshRunChecked is sshRun; approve, when set, is called with the auth id
// of a check the session is held for, while it is held.
func sshRunChecked(t *testing.T, ops *osNode, approve func(id string), login string, remote ...string) cliRun {
	t.Helper()
	cmd := ops.command(append([]string{"ssh", login + "@coily-host"}, remote...)...)
	var out bytes.Buffer
	errb := &checkWatch{approve: approve}
	cmd.Stdout, cmd.Stderr = &out, errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-time.After(time.Minute):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("tailscale ssh %s@coily-host %v: no answer within a minute\nstderr: %s", login, remote, errb.String())
	}
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return cliRun{code: code, stdout: out.String(), stderr: errb.String()}
}

// checkWatch collects stderr and, the first time the check's line
// appears, calls approve with its auth id.
type checkWatch struct {
	mu       sync.Mutex
	buf      bytes.Buffer
	approve  func(string)
	approved bool
}

func (w *checkWatch) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if m := checkURL.FindStringSubmatch(w.buf.String()); m != nil && !w.approved && w.approve != nil {
		w.approved = true
		go w.approve(m[1])
	}
	return len(p), nil
}

func (w *checkWatch) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// sleepers returns the pids of the processes whose command line holds
// mark (the sandboxed command and the sandbox around it).
func sleepers(mark string) []string {
	var pids []string
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		cmdline, err := os.ReadFile(filepath.Join(d, "cmdline"))
		if err != nil || !bytes.Contains(cmdline, []byte(mark)) {
			continue
		}
		if pid := filepath.Base(d); pid != fmt.Sprint(os.Getpid()) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// TestHeadscaleTailscaleSSHLockout: `tailscale ssh OPERATOR@coily-host
// coily lockout` from an operator's laptop, the real Tailscale SSH: a real
// tailscaled --ssh on the trust point's host and one on the laptop
// (userspace networking both, joined to headscale, whose policy's ssh
// section says who may log in as whom), the real tailscale CLI driving the
// system's ssh. The lockout kills a sandboxed command in flight; status
// says who (the local login the session ran as); unlock works for a login
// in the socket's group and no other; a login the ssh policy does not
// name (root) is refused by Tailscale SSH itself.
func TestHeadscaleTailscaleSSHLockout(t *testing.T) {
	requireComponent(t, os.Geteuid() == 0, "root (local logins, tailscaled --ssh switching users)")
	_, err := exec.LookPath("ssh")
	requireComponent(t, err == nil, "ssh (openssh-client): the tailscale CLI runs it")
	_, err = exec.LookPath("bwrap")
	requireComponent(t, err == nil, "bwrap")
	tailscaleBins(t)
	group, operator, guest := localLogins(t)

	hs := headscaletest.Start(t, headscaletest.Options{LowLatency: true, Policy: fmt.Sprintf(sshTailnetPolicy, operator, guest)})
	env := append(append(os.Environ(), hs.Env()...), devnet.OfflineEnv()...)

	// The trust point: coily serve on the local socket, the operators'
	// group's to reach (the state directory is traversable, the socket
	// 0660 in that group).
	dir := shortDir(t)
	if err := os.Chmod(dir, 0o711); err != nil {
		t.Fatal(err)
	}
	pol := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(pol, []byte(fmt.Sprintf(sshCoilyPolicy, group)), 0o644); err != nil {
		t.Fatal(err)
	}
	p := startServe(t, dir, pol, "--socket-group", group)

	startOSNode(t, hs, env, "coily-host", hs.AuthKey(t, headscaletest.Key{Tags: []string{"tag:coily-host"}}), "", nil, "--ssh")
	ops := startOSNode(t, hs, env, "ops-laptop", hs.AuthKey(t, headscaletest.Key{User: hs.CreateUser(t, "ops").ID}), "", nil)
	ops.waitPeer(t, "coily-host", func(p osPeer) bool { return len(p.SSHHostKeys) > 0 })

	// The operator's first session is held for a check, which headscale's
	// administrator approves; until then nothing runs.
	approved := make(chan string, 1)
	approve := func(id string) {
		if out, err := hs.CLI("auth", "approve", "--auth-id", id); err != nil {
			t.Errorf("headscale auth approve: %v\n%s", err, out)
		}
		approved <- id
	}
	r := sshRunChecked(t, ops, approve, operator, coilyBin, "--socket", p.socket, "status")
	select {
	case <-approved:
	default:
		t.Fatalf("the operator's first session was not held for a check: exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	if r.code != 0 || !regexp.MustCompile(`(?m)^lockout:\s+off$`).MatchString(r.stdout) {
		t.Fatalf("status after the check: exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}

	// A sandboxed command in flight.
	mark := fmt.Sprintf("%d.%03d", 900+time.Now().Nanosecond()%99, time.Now().Nanosecond()%1000)
	running := exec.Command(coilyBin, "--socket", p.socket, "exec", "--", "/bin/sleep", mark)
	var runOut bytes.Buffer
	running.Stdout, running.Stderr = &runOut, &runOut
	if err := running.Start(); err != nil {
		t.Fatal(err)
	}
	runDone := make(chan error, 1)
	go func() { runDone <- running.Wait() }()
	t.Cleanup(func() {
		_ = running.Process.Kill()
		<-runDone
	})
	waitFor(t, 30*time.Second, "the sandboxed sleep to run", func() bool { return len(sleepers(mark)) >= 2 })

	// The runbook's lockout.
	start := time.Now()
	r = sshRun(t, ops, operator, coilyBin, "--socket", p.socket, "lockout", "--reason", "tailscale ssh drill")
	returned := time.Since(start)
	if r.code != 0 || !strings.Contains(r.stdout, "locked out by local:"+operator) {
		t.Fatalf("tailscale ssh %s@coily-host coily lockout: exit %d\nstdout: %s\nstderr: %s", operator, r.code, r.stdout, r.stderr)
	}
	waitFor(t, 30*time.Second, "the sandboxed command to die", func() bool { return len(sleepers(mark)) == 0 })
	dead := time.Since(start)
	select {
	case err := <-runDone:
		runDone <- err
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 125 || !strings.Contains(runOut.String(), "lockout-active") {
			t.Fatalf("the command in flight: %v\n%s; want refused (lockout-active)", err, runOut.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("the command in flight did not end after the lockout")
	}
	t.Logf("lockout by tailscale ssh: the command returned after %v, the last sandboxed process was dead after %v",
		returned.Round(time.Millisecond), dead.Round(time.Millisecond))

	active := regexp.MustCompile(`(?m)^lockout:\s+ACTIVE since .* by local:` + operator + ` \(tailscale ssh drill\)$`)
	if r := sshRun(t, ops, operator, coilyBin, "--socket", p.socket, "status"); r.code != 0 || !active.MatchString(r.stdout) {
		t.Fatalf("tailscale ssh … coily status: exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}

	// A login outside the socket's group reaches the host but not the
	// socket; root is not a login the ssh policy grants at all.
	if r := sshRun(t, ops, guest, coilyBin, "--socket", p.socket, "unlock"); r.code == 0 {
		t.Fatalf("unlock by %s, outside the socket's group: %+v", guest, r)
	}
	if r := sshRun(t, ops, "root", coilyBin, "--socket", p.socket, "unlock"); r.code == 0 ||
		!strings.Contains(r.stderr, "policy does not permit") {
		t.Fatalf("tailscale ssh root@coily-host: exit %d stdout %q stderr %q; want refused by the tailnet policy", r.code, r.stdout, r.stderr)
	}
	if r := p.run(t, "status"); !active.MatchString(r.stdout) {
		t.Fatalf("the lockout did not hold: %s", r.stdout)
	}

	if r := sshRun(t, ops, operator, coilyBin, "--socket", p.socket, "unlock", "--reason", "drill over"); r.code != 0 {
		t.Fatalf("tailscale ssh … coily unlock: %+v", r)
	}
	if r := sshRun(t, ops, operator, coilyBin, "--socket", p.socket, "status"); r.code != 0 ||
		!regexp.MustCompile(`(?m)^lockout:\s+off$`).MatchString(r.stdout) {
		t.Fatalf("status after unlock: %+v", r)
	}
}

// waitFor polls cond until it holds or d passes.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
