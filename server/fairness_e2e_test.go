package server_test

import (
	"context"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"coily.dev/coily/descriptor"
	"coily.dev/coily/internal/testserver"
	coilyv1 "coily.dev/coily/proto/coily/v1"
	"coily.dev/coily/refusal"
)

// fairPolicy lets two principals run commands: the local operator (Exec)
// and sandbox:demo (Relay). %s is the limits.
const fairPolicy = `version: 1
limits: %s
roles:
  operator:
    permissions: [exec, lockout, unlock, status, approve, relay, keys]
    commands: ["*"]
    sandboxes: [demo]
  sandboxed:
    permissions: [exec]
    commands: ["*"]
grants:
  - principals: ["sandbox:demo"]
    roles: [sandboxed]
commands:
  - {name: echo, binary: /bin/echo, args: ["**"], flags: any, sandbox: native}
  - {name: sh, binary: /bin/sh, args: ["**"], flags: any, sandbox: native, timeout: 5m}
`

func newFairEnv(t *testing.T, limits string, killGrace time.Duration) *relayEnv {
	t.Helper()
	in := testserver.Start(t, testserver.Options{Policy: strings.Replace(fairPolicy, "%s", limits, 1), KillGrace: killGrace})
	e := &relayEnv{in: in, api: in.Client.API}
	k, err := e.api.IssueKey(context.Background(), &coilyv1.IssueKeyRequest{Sandbox: "demo"})
	if err != nil {
		t.Fatal(err)
	}
	e.key = k.GetKey().GetSecret()
	// A relayed request waiting for approval outlives its bridge's call:
	// deny what a failed test left pending, or stopping the server waits
	// for it to expire.
	t.Cleanup(func() {
		l, _ := e.api.ListApprovals(context.Background(), &coilyv1.ListApprovalsRequest{})
		for _, a := range l.GetApprovals() {
			_, _ = e.api.Decide(context.Background(), &coilyv1.DecideRequest{Id: a.GetId(), Verdict: coilyv1.Verdict_VERDICT_DENY})
		}
	})
	return e
}

type relayResult struct {
	r   *descriptor.Response
	err error
}

type relayChan <-chan relayResult

// answer waits (at most 30 s) for the relayed request's answer.
func (c relayChan) answer(t *testing.T) relayResult {
	t.Helper()
	select {
	case rr := <-c:
		return rr
	case <-time.After(30 * time.Second):
		t.Fatal("no answer")
	}
	return relayResult{}
}

// reloadPolicy writes text as the policy and reloads it.
func reloadPolicy(t *testing.T, in *testserver.Instance, text string) {
	t.Helper()
	if err := os.WriteFile(in.PolicyPath, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := in.Server.ReloadPolicy(context.Background(), in.PolicyPath); err != nil {
		t.Fatal(err)
	}
}

// relayAsync relays a request of sandbox:demo in the background.
func (e *relayEnv) relayAsync(t *testing.T, confirm bool, argv ...string) relayChan {
	t.Helper()
	ch := make(chan relayResult, 1)
	e.relayTo(t, ch, confirm, argv...)
	return ch
}

// relayTo relays a request of sandbox:demo in the background and sends
// its answer to out.
func (e *relayEnv) relayTo(t *testing.T, out chan<- relayResult, confirm bool, argv ...string) {
	t.Helper()
	id := descriptor.NewID()
	file, err := descriptor.MarshalRequest(&descriptor.Request{ID: id, CreatedAt: time.Now().UTC(),
		Nonce: hex.EncodeToString([]byte(id))[:32], Sandbox: "demo", Argv: argv, RequiresConfirm: confirm}, e.key)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		resp, err := e.api.Relay(ctx, &coilyv1.RelayRequest{Sandbox: "demo", Id: id, Request: file})
		if err != nil {
			out <- relayResult{err: err}
			return
		}
		r, err := descriptor.ParseResponse(resp.GetResponse())
		out <- relayResult{r, err}
	}()
}

func (rr relayResult) wantExit(t *testing.T, stdout string) {
	t.Helper()
	if rr.err != nil || rr.r.Outcome != descriptor.OutcomeExit || rr.r.StdoutText != stdout {
		t.Fatalf("relay: %v %+v, want exit with %q", rr.err, rr.r, stdout)
	}
}

func (rr relayResult) wantRefused(t *testing.T, code refusal.Code, msg string) {
	t.Helper()
	if rr.err != nil || rr.r.Outcome != descriptor.OutcomeRefused || rr.r.Code != string(code) || !strings.Contains(rr.r.Message, msg) {
		t.Fatalf("relay: %v %+v, want %s naming %q", rr.err, rr.r, code, msg)
	}
}

// wantBusy asserts a concurrency-busy refusal whose message names msg.
func wantBusy(t *testing.T, err error, msg string) {
	t.Helper()
	wantCode(t, err, refusal.ConcurrencyBusy)
	if r := refusal.As(err); !strings.Contains(r.Msg, msg) {
		t.Fatalf("concurrency-busy %q does not name %q", r.Msg, msg)
	}
}

// waitFor is a shell loop that says it started, then waits for a file.
func waitFor(started, marker string) string {
	return "touch " + started + "; while [ ! -e " + marker + " ]; do sleep 0.01; done; echo done"
}

// One principal flooding the server with long commands gets its own cap
// of slots (limits.per_principal, by default every slot but one); the
// other principal still runs, until the server-wide cap is reached.
func TestFairSharingTwoPrincipals(t *testing.T) {
	e := newFairEnv(t, "{concurrency: 3}", 0)
	dir := t.TempDir()
	marker := filepath.Join(dir, "done")
	const flood = 5
	results := make(chan relayResult, flood)
	for i := range flood {
		e.relayTo(t, results, false, "/bin/sh", "-c", waitFor(filepath.Join(dir, "started"+string(rune('0'+i))), marker))
	}
	// Two run (sandbox:demo's cap); the other three are refused at once,
	// naming the principal's cap.
	refused := 0
	for range flood - 2 {
		select {
		case rr := <-results:
			rr.wantRefused(t, refusal.ConcurrencyBusy, "principal cap: sandbox:demo already runs 2")
			refused++
		case <-time.After(30 * time.Second):
			t.Fatalf("only %d of the flood refused", refused)
		}
	}
	testserver.Poll(t, 10*time.Second, "two flooding commands to start", func() bool {
		m, _ := filepath.Glob(filepath.Join(dir, "started*"))
		return len(m) == 2
	})
	// The other principal still gets a slot.
	if r := execArgv(t, e.in, "/bin/echo", "mine"); r.err != nil || r.stdout != "mine\n" {
		t.Fatalf("second principal starved: %+v", r)
	}
	// Its long command takes the last slot: now the server's cap is what
	// refuses it, though it runs only one.
	mine := startRunning(t, e.in, "/bin/sh", "-c", "echo go; while [ ! -e "+marker+" ]; do sleep 0.01; done")
	wantBusy(t, execArgv(t, e.in, "/bin/echo").err, "server cap: 3 of 3 command slots in use")
	touch(t, marker)
	if r := <-mine; r.err != nil {
		t.Fatal(r.err)
	}
	for range 2 {
		(<-results).wantExit(t, "done\n")
	}
	// Every slot was given back.
	if r := execArgv(t, e.in, "/bin/echo", "again"); r.err != nil {
		t.Fatalf("slots not released: %v", r.err)
	}
}

// pendingApproval waits for exactly one pending approval and returns it.
func pendingApproval(t *testing.T, e *relayEnv) *coilyv1.Approval {
	t.Helper()
	var got *coilyv1.Approval
	testserver.Poll(t, 10*time.Second, "a pending approval", func() bool {
		l, err := e.api.ListApprovals(context.Background(), &coilyv1.ListApprovalsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if len(l.GetApprovals()) == 1 {
			got = l.GetApprovals()[0]
		}
		return got != nil
	})
	return got
}

func approve(t *testing.T, e *relayEnv, id string) {
	t.Helper()
	if _, err := e.api.Decide(context.Background(), &coilyv1.DecideRequest{Id: id, Verdict: coilyv1.Verdict_VERDICT_APPROVE}); err != nil {
		t.Fatalf("approve: %v", err)
	}
}

// A request waiting for a human holds no slot: with one slot server-wide,
// another command runs while it waits. Approved while the slot is busy, it
// waits for the slot instead of being refused, and runs once it is free.
func TestApprovalHoldsNoSlot(t *testing.T) {
	e := newFairEnv(t, "{concurrency: 1}", 0)
	marker := filepath.Join(t.TempDir(), "done")
	// Runs only after the marker exists: it must not start before the
	// slot is free.
	waiting := e.relayAsync(t, true, "/bin/sh", "-c", "test -e "+marker+" && echo after")
	ap := pendingApproval(t, e)
	if r := execArgv(t, e.in, "/bin/echo", "meanwhile"); r.err != nil || r.stdout != "meanwhile\n" {
		t.Fatalf("a pending approval held the only slot: %+v", r)
	}
	// Its waiting requests are capped like its running ones.
	e.relayAsync(t, true, "/bin/echo", "second").wantRefusedNow(t, "sandbox:demo already has 1 request(s) waiting")

	long := startRunning(t, e.in, "/bin/sh", "-c", "echo go; while [ ! -e "+marker+" ]; do sleep 0.01; done")
	approve(t, e, ap.GetId())
	touch(t, marker)
	if r := <-long; r.err != nil {
		t.Fatal(r.err)
	}
	select {
	case rr := <-waiting:
		rr.wantExit(t, "after\n")
	case <-time.After(30 * time.Second):
		t.Fatal("the approved request never got the freed slot")
	}
	if r := execArgv(t, e.in, "/bin/echo"); r.err != nil {
		t.Fatalf("slot not released: %v", r.err)
	}
}

// wantRefusedNow waits for a relay's answer and asserts concurrency-busy.
func (ch relayChan) wantRefusedNow(t *testing.T, msg string) {
	t.Helper()
	select {
	case rr := <-ch:
		rr.wantRefused(t, refusal.ConcurrencyBusy, msg)
	case <-time.After(30 * time.Second):
		t.Fatal("no answer")
	}
}

// A lockout ends the wait of an approved request for a slot at once, not
// when the command holding the slot is killed.
func TestLockoutEndsSlotWait(t *testing.T) {
	e := newFairEnv(t, "{concurrency: 1}", 2*time.Second)
	marker := filepath.Join(t.TempDir(), "never")
	// It ignores SIGTERM: it holds the slot until SIGKILL, 2 s on.
	long := startRunning(t, e.in, "/bin/sh", "-c", "trap '' TERM; echo go; while [ ! -e "+marker+" ]; do sleep 0.01; done")
	waiting := e.relayAsync(t, true, "/bin/echo", "approved")
	approve(t, e, pendingApproval(t, e).GetId())
	if _, err := e.api.Lockout(context.Background(), &coilyv1.LockoutRequest{Reason: "test"}); err != nil {
		t.Fatal(err)
	}
	select {
	case rr := <-waiting:
		rr.wantRefused(t, refusal.LockoutActive, "locked out")
	case r := <-long:
		t.Fatalf("the queued request waited for the slot holder to die (%v)", r.err)
	}
	if r := <-long; r.err == nil {
		t.Fatal("the running command survived the lockout")
	}
}

// Each cap refuses with concurrency-busy naming itself.
func TestConcurrencyBusyNamesTheCap(t *testing.T) {
	tests := []struct {
		name, limits, rule, want string
	}{
		{"rule", "{concurrency: 4}", "concurrency: 1", `rule cap: rule "sh" already runs 1`},
		{"principal", "{concurrency: 4, per_principal: 1}", "", "principal cap: local:"},
		{"rule per principal", "{concurrency: 4}", "per_principal: 1", `principal cap of rule "sh": local:`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pol := "version: 1\nlimits: " + tt.limits + `
roles: {operator: {permissions: [exec], commands: ["*"]}}
commands:
  - {name: sh, binary: /bin/sh, args: ["**"], flags: any, sandbox: native, ` + tt.rule + `}
  - {name: echo, binary: /bin/echo, args: ["**"], sandbox: native}
`
			in := testserver.Start(t, testserver.Options{Policy: pol})
			marker := filepath.Join(in.StateDir, "done")
			first := startRunning(t, in, "/bin/sh", "-c", "echo go; while [ ! -e "+marker+" ]; do sleep 0.01; done")
			wantBusy(t, execArgv(t, in, "/bin/sh", "-c", "true").err, tt.want)
			// Only the principal cap also holds for another rule.
			r := execArgv(t, in, "/bin/echo", "other")
			if tt.name == "principal" {
				wantBusy(t, r.err, tt.want)
			} else if r.err != nil {
				t.Fatalf("another rule: %v", r.err)
			}
			touch(t, marker)
			if r := <-first; r.err != nil {
				t.Fatal(r.err)
			}
			if r := execArgv(t, in, "/bin/sh", "-c", "true"); r.err != nil {
				t.Fatalf("slot not released: %v", r.err)
			}
		})
	}
}

// A request approved after the owner reloaded the policy is decided again
// under the new one: a grant revoked while it waited applies to it, and
// the command does not run.
func TestApprovedAfterReloadDecidedAgain(t *testing.T) {
	e := newFairEnv(t, "{concurrency: 2}", 0)
	marker := filepath.Join(t.TempDir(), "ran")
	waiting := e.relayAsync(t, true, "/bin/sh", "-c", "touch "+marker)
	ap := pendingApproval(t, e)
	// The owner revokes sandbox:demo's grant while the request waits.
	revoked := strings.Replace(strings.Replace(fairPolicy, "%s", "{concurrency: 2}", 1),
		`  - principals: ["sandbox:demo"]
    roles: [sandboxed]
`, `  - principals: ["sandbox:nobody"]
    roles: [sandboxed]
`, 1)
	reloadPolicy(t, e.in, revoked)
	approve(t, e, ap.GetId())
	waiting.answer(t).wantRefused(t, refusal.PolicyDeny, "the policy changed while the request waited for approval")
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the command ran under the revoked grant")
	}
}

// A rule changed while its request waited (here: a longer timeout) is not
// what the approver saw: the request is refused and asked again; a reload
// that leaves the rule as it was does not disturb it.
func TestApprovedAfterRuleChangedAskedAgain(t *testing.T) {
	e := newFairEnv(t, "{concurrency: 2}", 0)
	pol := strings.Replace(fairPolicy, "%s", "{concurrency: 2}", 1)
	reload := func(text string) { t.Helper(); reloadPolicy(t, e.in, text) }
	waiting := e.relayAsync(t, true, "/bin/echo", "same")
	ap := pendingApproval(t, e)
	reload(pol + "# a comment: the rules are as they were\n")
	approve(t, e, ap.GetId())
	waiting.answer(t).wantExit(t, "same\n")
	waiting = e.relayAsync(t, true, "/bin/echo", "widened")
	ap = pendingApproval(t, e)
	reload(strings.Replace(pol, "flags: any, sandbox: native}\n  - {name: sh", "flags: any, sandbox: native, timeout: 2h}\n  - {name: sh", 1))
	approve(t, e, ap.GetId())
	waiting.answer(t).wantRefused(t, refusal.PolicyDeny, `rule "echo" is not what was approved`)
}

// A rule that stayed the same while its workspace moved (the policy's
// workspaces: names it, the rule only its name) is not what was approved
// either: the request is asked again, and nothing runs in the new place.
func TestApprovedAfterWorkspaceMovedAskedAgain(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	pol := func(ws string) string {
		return strings.Replace(strings.Replace(fairPolicy, "%s", "{concurrency: 2}", 1), "roles:",
			"workspaces: {w: "+ws+"}\nroles:", 1) +
			"  - {name: touch, binary: /usr/bin/touch, args: [\"**\"], flags: any, sandbox: native, workspace: w}\n"
	}
	in := testserver.Start(t, testserver.Options{Policy: pol(a)})
	e := &relayEnv{in: in, api: in.Client.API}
	k, err := e.api.IssueKey(context.Background(), &coilyv1.IssueKeyRequest{Sandbox: "demo"})
	if err != nil {
		t.Fatal(err)
	}
	e.key = k.GetKey().GetSecret()
	waiting := e.relayAsync(t, true, "/usr/bin/touch", "planted")
	ap := pendingApproval(t, e)
	reloadPolicy(t, in, pol(b))
	approve(t, e, ap.GetId())
	waiting.answer(t).wantRefused(t, refusal.PolicyDeny, `rule "touch" is not what was approved`)
	for _, dir := range []string{a, b} {
		if _, err := os.Stat(filepath.Join(dir, "planted")); err == nil {
			t.Fatalf("the command ran in %s", dir)
		}
	}
}
