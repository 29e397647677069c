package main

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"coily.dev/coily/audit"
)

const approvalPolicy = `version: 1
local_operators: {users: [nobody]}
limits: {concurrency: 4}
roles:
  operator:
    permissions: [exec, lockout, unlock, pause, resume, status, approve]
    commands: ["*"]
commands:
  - {name: confirm-echo, binary: /bin/echo, args: ["**"], sandbox: native, confirm: true, confirm_timeout: 30s}
  - {name: quick-expiry, binary: /bin/true, sandbox: native, confirm: true, confirm_timeout: 300ms}
`

var approvalLine = regexp.MustCompile(`needs approval (\S+) `)

// pendingExec starts `coily exec` as root and returns once the server has
// created its approval, with the approval id and a channel for the result.
func pendingExec(t *testing.T, p *serveProc, argv ...string) (string, <-chan cliRun) {
	t.Helper()
	cmd := exec.Command(coilyBin, append([]string{"--socket", p.socket, "exec", "--"}, argv...)...)
	var out bytes.Buffer
	cmd.Stdout = &out
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	rd := bufio.NewReader(stderr)
	line, err := rd.ReadString('\n')
	m := approvalLine.FindStringSubmatch(line)
	if err != nil || m == nil {
		t.Fatalf("no approval announced: %q %v", line, err)
	}
	done := make(chan cliRun, 1)
	go func() {
		rest, _ := io.ReadAll(rd)
		err := cmd.Wait()
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		}
		done <- cliRun{code: code, stdout: out.String(), stderr: string(rest)}
	}()
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	return m[1], done
}

func waitRun(t *testing.T, ch <-chan cliRun) cliRun {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(30 * time.Second):
		t.Fatal("requester did not finish")
		return cliRun{}
	}
}

func TestCLIApprovals(t *testing.T) {
	requireComponent(t, os.Geteuid() == 0, "root (to run the approver as another uid)")
	dir := shortDir(t)
	pol := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(pol, []byte(approvalPolicy), 0o644); err != nil {
		t.Fatal(err)
	}
	p := startServe(t, dir, pol, "--socket-group", "nogroup")
	nobody := &syscall.Credential{Uid: 65534, Gid: 65534}
	asNobody := func(args ...string) cliRun {
		return runCoily(t, nobody, append([]string{"--socket", p.socket}, args...)...)
	}

	// Approved by another principal: the command runs.
	id, done := pendingExec(t, p, "/bin/echo", "approved")
	if r := p.run(t, "approvals", "list"); r.code != 0 || !strings.Contains(r.stdout, id) || !strings.Contains(r.stdout, "pending") {
		t.Fatalf("list: %+v", r)
	}
	if r := p.run(t, "approvals", "approve", id); r.code != 125 || !strings.Contains(r.stderr, "(permission-denied)") {
		t.Fatalf("self-approval: %+v", r)
	}
	if r := asNobody("approvals", "approve", id, "--note", "looks fine"); r.code != 0 || !strings.Contains(r.stdout, "approved") {
		t.Fatalf("approve as nobody: %+v", r)
	}
	if r := waitRun(t, done); r.code != 0 || r.stdout != "approved\n" {
		t.Fatalf("requester after approval: %+v", r)
	}
	// The approval id, the one id requester and approver see, finds every
	// record of the request.
	r := runCoily(t, nil, "audit", "show", "--state-dir", dir, id)
	for _, event := range []string{"approval.request", "approval.decide", "exec.decision", "exec.result"} {
		if r.code != 0 || !strings.Contains(r.stdout, "  "+event+"  ") {
			t.Fatalf("audit show %s lacks %s: %+v", id, event, r)
		}
	}

	// Denied: the requester is refused with confirm-rejected.
	id, done = pendingExec(t, p, "/bin/echo", "never")
	if r := asNobody("approvals", "deny", id, "--note", "not now"); r.code != 0 {
		t.Fatalf("deny: %+v", r)
	}
	if r := waitRun(t, done); r.code != 125 || !strings.Contains(r.stderr, "(confirm-rejected)") || r.stdout != "" {
		t.Fatalf("requester after denial: %+v", r)
	}

	// Expiry: confirm-timeout.
	_, done = pendingExec(t, p, "/bin/true")
	if r := waitRun(t, done); r.code != 125 || !strings.Contains(r.stderr, "(confirm-timeout)") {
		t.Fatalf("requester after expiry: %+v", r)
	}

	// Lockout rejects what is pending.
	id, done = pendingExec(t, p, "/bin/echo", "locked")
	if r := runCoily(t, nil, "audit", "show", "--state-dir", dir, id); r.code != 0 || !strings.Contains(r.stdout, "  approval.request  ") {
		t.Fatalf("audit show of a pending approval %s: %+v", id, r) // its request's one record so far names it
	}
	if r := p.run(t, "lockout", "--reason", "test"); r.code != 0 {
		t.Fatalf("lockout: %+v", r)
	}
	if r := waitRun(t, done); r.code != 125 || !strings.Contains(r.stderr, "(lockout-active)") || r.stdout != "" {
		t.Fatalf("requester after lockout: %+v", r)
	}
	if r := p.run(t, "unlock"); r.code != 0 {
		t.Fatalf("unlock: %+v", r)
	}

	// Decisions are audited with both identities.
	recs, err := audit.Tail(filepath.Join(dir, "audit"), 200)
	if err != nil {
		t.Fatal(err)
	}
	var approved, selfRefused bool
	for _, r := range recs {
		if r.Event != "approval.decide" {
			continue
		}
		switch {
		case r.Decision == "allow" && r.Principal == "local:nobody" && r.Details["requester"] == "local:root":
			approved = true
		case r.Decision == "refuse" && r.Principal == "local:root" && r.Code == "permission-denied":
			selfRefused = true
		}
	}
	if !approved || !selfRefused {
		t.Fatalf("approval decisions not audited with both identities (approved=%v selfRefused=%v)", approved, selfRefused)
	}
}

func TestCLIPolicyCheckAndExplain(t *testing.T) {
	example, _ := filepath.Abs("../../examples/policy.yaml")
	if r := runCoily(t, nil, "policy", "check", example); r.code != 0 || !strings.Contains(r.stdout, ": OK: ") {
		t.Fatalf("check: %+v", r)
	}
	r := runCoily(t, nil, "policy", "explain", "--policy", example, "--as", "tag:agent", "--", "/usr/bin/gh", "auth", "token")
	if r.code != 1 || !strings.Contains(r.stdout, "decision:  DENY") || !strings.Contains(r.stdout, "gh-auth-token") ||
		!strings.Contains(r.stdout, "coily never hands out the GitHub token") {
		t.Fatalf("explain gh auth token: %+v", r)
	}
	broken := filepath.Join(t.TempDir(), "broken.yaml")
	if err := os.WriteFile(broken, []byte("version: 1\ncommands:\n  - name: x\n    binary: /bin/echo\n    flags: 7\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if r := runCoily(t, nil, "policy", "check", broken); r.code != 1 || !regexp.MustCompile(`broken\.yaml:5:\d+: `).MatchString(r.stderr) {
		t.Fatalf("check broken: %+v", r)
	}
}
