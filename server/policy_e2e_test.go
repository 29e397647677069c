package server_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"coily.dev/coily/audit"
	"coily.dev/coily/internal/testserver"
	"coily.dev/coily/policy"
	"coily.dev/coily/policyfile"
	coilyv1 "coily.dev/coily/proto/coily/v1"
	"coily.dev/coily/refusal"
)

func TestRateLimitSurvivesRestart(t *testing.T) {
	pol := `version: 1
roles: {operator: {permissions: [exec], commands: [echo]}}
commands:
  - {name: echo, binary: /bin/echo, args: ["**"], sandbox: native, rate: {per_minute: 10}}
`
	in := testserver.Start(t, testserver.Options{Policy: pol})
	in.Client.RateLimitRetries = 0
	for i := range 10 {
		if r := execArgv(t, in, "/bin/echo", "ok"); r.err != nil {
			t.Fatalf("call %d: %v", i+1, r.err)
		}
	}
	check := func(in *testserver.Instance) {
		t.Helper()
		r := execArgv(t, in, "/bin/echo", "eleventh")
		wantCode(t, r.err, refusal.RateLimit)
		var re *refusal.Error
		errors.As(r.err, &re)
		if re.RetryAfter <= 0 || re.RetryAfter > 6*time.Second {
			t.Fatalf("retry after %v, want (0, 6s]", re.RetryAfter)
		}
	}
	check(in)
	in = in.Restart(testserver.Options{Policy: pol})
	in.Client.RateLimitRetries = 0
	check(in)
}

func TestConcurrencyCaps(t *testing.T) {
	pol := `version: 1
limits: {concurrency: 2, per_principal: 2}
roles: {operator: {permissions: [exec], commands: ["*"]}}
commands:
  - {name: sh, binary: /bin/sh, args: ["**"], flags: any, sandbox: native, concurrency: 1}
  - {name: echo, binary: /bin/echo, args: ["**"], sandbox: native}
`
	in := testserver.Start(t, testserver.Options{Policy: pol})
	marker := filepath.Join(in.StateDir, "done")
	wait := "echo go; while [ ! -e " + marker + " ]; do sleep 0.01; done"
	first := startRunning(t, in, "/bin/sh", "-c", wait)
	// The rule's own cap (1) is reached; echo still has a server-wide slot.
	wantCode(t, execArgv(t, in, "/bin/sh", "-c", "true").err, refusal.ConcurrencyBusy)
	if r := execArgv(t, in, "/bin/echo", "free"); r.err != nil {
		t.Fatalf("echo: %v", r.err)
	}
	touch(t, marker)
	if r := <-first; r.err != nil {
		t.Fatal(r.err)
	}
	// Slots are given back: the rule runs again.
	if r := execArgv(t, in, "/bin/sh", "-c", "true"); r.err != nil {
		t.Fatalf("slot not released: %v", r.err)
	}
}

func TestGlobalConcurrencyDefaultsToOne(t *testing.T) {
	pol := `version: 1
roles: {operator: {permissions: [exec], commands: ["*"]}}
commands:
  - {name: sh, binary: /bin/sh, args: ["**"], flags: any, sandbox: native}
`
	in := testserver.Start(t, testserver.Options{Policy: pol})
	marker := filepath.Join(in.StateDir, "done")
	first := startRunning(t, in, "/bin/sh", "-c", "echo go; while [ ! -e "+marker+" ]; do sleep 0.01; done")
	wantCode(t, execArgv(t, in, "/bin/sh", "-c", "true").err, refusal.ConcurrencyBusy)
	touch(t, marker)
	<-first
}

func TestExecEnvAndDenyRules(t *testing.T) {
	pol := `version: 1
limits: {concurrency: 4}
roles: {operator: {permissions: [exec], commands: ["*"]}}
commands:
  - name: no-rm
    effect: deny
    binary: /bin/sh
    args: ["-c", "*rm *"]
    reason: "no deleting through coily"
  - {name: sh, binary: /bin/sh, args: ["**"], flags: any, sandbox: native, env: [GREETING]}
`
	in := testserver.Start(t, testserver.Options{Policy: pol})
	r := execReq(t, in, &coilyv1.ExecRequest{Argv: []string{"/bin/sh", "-c", "echo $GREETING"}, Env: map[string]string{"GREETING": "hello"}})
	if r.err != nil || r.stdout != "hello\n" {
		t.Fatalf("allowed env: %q %v", r.stdout, r.err)
	}
	r = execReq(t, in, &coilyv1.ExecRequest{Argv: []string{"/bin/sh", "-c", "true"}, Env: map[string]string{"LD_PRELOAD": "/tmp/x.so"}})
	wantCode(t, r.err, refusal.PolicyDeny)
	r = execArgv(t, in, "/bin/sh", "-c", "rm -rf /tmp/nothing")
	wantCode(t, r.err, refusal.PolicyDeny)
	if !strings.Contains(r.err.Error(), "no deleting through coily") {
		t.Fatalf("deny reason not shown: %v", r.err)
	}
}

func TestWorkspaceContainment(t *testing.T) {
	ws := t.TempDir()
	outside := t.TempDir()
	for _, d := range []string{"sub/deeper"} {
		if err := os.MkdirAll(filepath.Join(ws, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(outside, filepath.Join(ws, "escape")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("sub/deeper", filepath.Join(ws, "inside")); err != nil {
		t.Fatal(err)
	}
	pol := `version: 1
workspaces: {repo: ` + ws + `}
roles: {operator: {permissions: [exec], commands: ["*"]}}
commands:
  - {name: pwd, binary: /bin/pwd, flags: any, sandbox: native, workspace: repo}
`
	in := testserver.Start(t, testserver.Options{Policy: pol})
	realWS, _ := filepath.EvalSymlinks(ws)
	for _, tt := range []struct {
		cwd  string
		want string
		code refusal.Code
	}{
		{"", realWS, ""},
		{"sub", filepath.Join(realWS, "sub"), ""},
		{"inside", filepath.Join(realWS, "sub/deeper"), ""},
		{"sub/../sub/deeper", filepath.Join(realWS, "sub/deeper"), ""},
		{"escape", "", refusal.PolicyDeny},
		{"..", "", refusal.PolicyDeny},
		{"sub/../../", "", refusal.PolicyDeny},
		{"/etc", "", refusal.BadRequest},
		{"missing", "", refusal.BadRequest},
	} {
		r := execReq(t, in, &coilyv1.ExecRequest{Argv: []string{"/bin/pwd", "-P"}, Cwd: tt.cwd})
		if tt.code != "" {
			wantCode(t, r.err, tt.code)
			continue
		}
		if r.err != nil || strings.TrimSpace(r.stdout) != tt.want {
			t.Errorf("cwd %q: %q %v, want %q", tt.cwd, r.stdout, r.err, tt.want)
		}
	}
}

func TestPolicyLiveReload(t *testing.T) {
	in := testserver.Start(t, testserver.Options{WatchPolicy: true})
	if r := execArgv(t, in, "/bin/echo", "before"); r.err != nil {
		t.Fatal(r.err)
	}
	// A valid edit that drops echo takes effect without a restart.
	noEcho := strings.Replace(testserver.LocalPolicy, "commands: [echo, ", "commands: [", 1)
	writeAtomically(t, in.PolicyPath, noEcho)
	testserver.Poll(t, 10*time.Second, "the edited policy to take effect", func() bool {
		r := execArgv(t, in, "/bin/echo", "after")
		return r.err != nil && refusal.As(r.err).Code == refusal.PolicyDeny
	})
	// A broken edit is refused, audited, and the last good policy stays.
	broken := "version: 1\ncommands:\n  - {name: x, binary: relative}\n"
	writeAtomically(t, in.PolicyPath, broken)
	rec := in.WaitAudit(t, func(r audit.Record) bool { return r.Event == policyfile.EventReload && r.Decision == "refuse" })
	if !strings.Contains(rec.Reason, "policy.yaml:3:") {
		t.Fatalf("reload refusal does not name the line: %q", rec.Reason)
	}
	if sum := fmt.Sprintf("%x", sha256.Sum256([]byte(broken))); rec.Details["refused_sha256"] != sum || rec.Code != string(refusal.BadRequest) {
		t.Fatalf("reload refusal = code %q, details %v; want %s and refused_sha256 %s", rec.Code, rec.Details, refusal.BadRequest, sum)
	}
	wantCode(t, execArgv(t, in, "/bin/echo", "still").err, refusal.PolicyDeny)
	if r := execArgv(t, in, "/bin/true"); r.err != nil {
		t.Fatalf("last good policy not in force: %v", r.err)
	}
	st, err := in.Client.API.Status(context.Background(), &coilyv1.StatusRequest{})
	if err != nil || st.GetPolicySha256() == "" {
		t.Fatal(err)
	}
	// A file that cannot be read is refused and audited too; the last good
	// policy stays.
	if err := os.Remove(in.PolicyPath); err != nil {
		t.Fatal(err)
	}
	in.WaitAudit(t, func(r audit.Record) bool {
		return r.Event == policyfile.EventReload && r.Decision == "refuse" && strings.Contains(r.Reason, "no such file")
	})
	if r := execArgv(t, in, "/bin/true"); r.err != nil {
		t.Fatalf("last good policy not in force after the file went: %v", r.err)
	}
}

// A hostile policy file, 4 MiB of nested brackets after a valid start, is
// refused (with its place) and audited; the last good policy stays in
// force, and refusing it costs little memory. Before the YAML reader was
// bounded, it ran the server out of memory.
func TestPolicyReloadRefusesHostileFile(t *testing.T) {
	in := testserver.Start(t, testserver.Options{WatchPolicy: true})
	if r := execArgv(t, in, "/bin/echo", "before"); r.err != nil {
		t.Fatal(r.err)
	}
	prefix := testserver.LocalPolicy + "x: "
	hostile := prefix + strings.Repeat("[", policy.MaxFileSize-len(prefix))
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	writeAtomically(t, in.PolicyPath, hostile)
	rec := in.WaitAudit(t, func(r audit.Record) bool { return r.Event == policyfile.EventReload && r.Decision == "refuse" })
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	line := strings.Count(testserver.LocalPolicy, "\n") + 1
	if want := fmt.Sprintf("policy.yaml:%d:%d: nested more than %d deep", line, 3+policy.MaxDepth, policy.MaxDepth); !strings.Contains(rec.Reason, want) || rec.Code != string(refusal.BadRequest) {
		t.Fatalf("reload refusal = %s %q; want %s and %q", rec.Code, rec.Reason, refusal.BadRequest, want)
	}
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 256<<20 {
		t.Errorf("refusing the file allocated %d MiB", grew>>20)
	}
	if r := execArgv(t, in, "/bin/echo", "still"); r.err != nil {
		t.Fatalf("last good policy not in force: %v", r.err)
	}
}

// writeAtomically replaces path the way editors do: a new file renamed in.
func writeAtomically(t *testing.T, path, content string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func TestLockoutRefusesEverythingButStopControls(t *testing.T) {
	in := testserver.Start(t, testserver.Options{})
	ctx := context.Background()
	if _, err := in.Client.API.Lockout(ctx, &coilyv1.LockoutRequest{}); err != nil {
		t.Fatal(err)
	}
	_, err := in.Client.API.Pause(ctx, &coilyv1.PauseRequest{})
	wantCode(t, refusal.FromStatus(err), refusal.LockoutActive)
	_, err = in.Client.API.ListApprovals(ctx, &coilyv1.ListApprovalsRequest{})
	wantCode(t, refusal.FromStatus(err), refusal.LockoutActive)
	if _, err := in.Client.API.Status(ctx, &coilyv1.StatusRequest{}); err != nil {
		t.Fatalf("status while locked: %v", err)
	}
	if _, err := in.Client.API.Lockout(ctx, &coilyv1.LockoutRequest{}); err != nil {
		t.Fatalf("lockout while locked: %v", err)
	}
	if _, err := in.Client.API.Unlock(ctx, &coilyv1.UnlockRequest{}); err != nil {
		t.Fatal(err)
	}
	if _, err := in.Client.API.Pause(ctx, &coilyv1.PauseRequest{}); err != nil {
		t.Fatalf("pause after unlock: %v", err)
	}
}
