package server_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"coily.dev/coily/audit"
	"coily.dev/coily/client"
	"coily.dev/coily/descriptor"
	"coily.dev/coily/internal/testserver"
	coilyv1 "coily.dev/coily/proto/coily/v1"
	"coily.dev/coily/refusal"
)

// lockoutEveryPolicy runs sleep and echo in bubblewrap for the local
// operator, the tailnet's users and the demo sandbox.
const lockoutEveryPolicy = `version: 1
limits: {concurrency: 8, per_principal: 8}
roles:
  operator:
    permissions: [exec, lockout, unlock, status, relay, keys]
    commands: ["*"]
    sandboxes: [demo]
  agent: {permissions: [exec, status], commands: ["*"]}
grants:
  - {principals: ["*@fake-control.example.net", "sandbox:demo"], roles: [agent]}
commands:
  - {name: sleep, binary: /bin/sleep, args: ["*"], timeout: 5m}
  - {name: echo, binary: /bin/echo, args: ["**"]}
`

// startedExec starts a command over c's API and returns its request id
// once the server says it started, and the stream's end.
func startedExec(t *testing.T, c *client.Client, argv ...string) (string, <-chan error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	st, err := c.API.Exec(ctx, &coilyv1.ExecRequest{Argv: argv})
	if err != nil {
		t.Fatal(err)
	}
	for {
		m, err := st.Recv()
		if err != nil {
			t.Fatalf("%v: %v", argv, err)
		}
		if s := m.GetStarted(); s != nil {
			end := make(chan error, 1)
			go func() {
				for {
					if _, err := st.Recv(); err != nil {
						end <- err
						return
					}
				}
			}()
			return s.GetRequestId(), end
		}
	}
}

// relayWithID relays a signed descriptor for demo with the given id and
// returns the relay's answer when it comes.
func (e *relayEnv) relayWithID(t *testing.T, id string, argv ...string) <-chan *coilyv1.RelayResponse {
	t.Helper()
	_, file := e.signedWithID(t, id, argv...)
	out := make(chan *coilyv1.RelayResponse, 1)
	go func() {
		resp, err := e.api.Relay(context.Background(), &coilyv1.RelayRequest{Sandbox: "demo", Id: id, Request: file})
		if err != nil {
			t.Errorf("relay %v: %v", argv, err)
		}
		out <- resp
	}()
	return out
}

// Commands started by every transport, with every id trick a caller
// controls (a relayed request naming a running Exec's request id, or
// another relayed request's id with another body), are all stopped by a
// lockout: it counts each, and no process of any of them remains.
func TestLockoutStopsEveryTransportAndIDTrick(t *testing.T) {
	requireBwrap(t)
	in := testserver.Start(t, testserver.Options{Policy: lockoutEveryPolicy, Tailnet: true, KillGrace: 200 * time.Millisecond})
	e := &relayEnv{in: in, api: in.Client.API}
	k, err := e.api.IssueKey(context.Background(), &coilyv1.IssueKeyRequest{Sandbox: "demo"})
	if err != nil {
		t.Fatal(err)
	}
	e.key = k.GetKey().GetSecret()
	// Whatever fails, nothing outlives the test (a lockout stops it all).
	t.Cleanup(func() { _, _ = in.Client.API.Lockout(context.Background(), &coilyv1.LockoutRequest{Reason: "cleanup"}) })
	marker := func(n int) string { return fmt.Sprintf("5000.%d", n) }

	localID, localEnd := startedExec(t, in.Client, "/bin/sleep", marker(1))
	tailID, tailEnd := startedExec(t, in.TailnetClient(t, "alice-laptop"), "/bin/sleep", marker(2))

	// A relayed request under the local Exec's id runs and is answered;
	// the local Exec must not vanish from what a lockout stops.
	r, err := descriptor.ParseResponse((<-e.relayWithID(t, localID, "/bin/echo", "collides")).GetResponse())
	if err != nil || r.Outcome != descriptor.OutcomeExit || r.StdoutText != "collides\n" {
		t.Fatalf("relay under a running Exec's id: %+v %v", r, err)
	}
	// Relayed sleepers: one under a fresh id, one under the tailnet
	// Exec's id; then another body under the first's id.
	relayID := descriptor.NewID()
	relayed := e.relayWithID(t, relayID, "/bin/sleep", marker(3))
	underTail := e.relayWithID(t, tailID, "/bin/sleep", marker(4))
	for _, m := range []int{1, 2, 3, 4} {
		testserver.Poll(t, 10*time.Second, "sleep "+marker(m)+" running", func() bool {
			return len(procsWith("/bin/sleep\x00"+marker(m))) > 0
		})
	}
	dup := <-e.relayWithID(t, relayID, "/bin/sleep", marker(5))
	if !dup.GetDuplicate() {
		t.Errorf("another body under a running relayed id: not marked duplicate")
	}
	if r, err := descriptor.ParseResponse(dup.GetResponse()); err != nil || r.Code != string(refusal.ReplayDetected) {
		t.Errorf("another body under a running relayed id: %+v %v", r, err)
	}

	st, err := in.Client.API.Status(context.Background(), &coilyv1.StatusRequest{})
	if err != nil || st.GetRunning() != 4 {
		t.Fatalf("status before the lockout: %d running, %v", st.GetRunning(), err)
	}
	lo, err := in.Client.API.Lockout(context.Background(), &coilyv1.LockoutRequest{Reason: "every transport"})
	if err != nil {
		t.Fatal(err)
	}
	if lo.GetKilled() != 4 {
		t.Errorf("lockout killed %d, want 4", lo.GetKilled())
	}
	for _, m := range []int{1, 2, 3, 4, 5} {
		waitNone(t, "/bin/sleep\x00"+marker(m))
	}
	for _, end := range []<-chan error{localEnd, tailEnd} {
		if err := <-end; code(err) != refusal.LockoutActive {
			t.Errorf("an Exec stream ended with %v, want lockout-active", err)
		}
	}
	for _, ch := range []<-chan *coilyv1.RelayResponse{relayed, underTail} {
		r, err := descriptor.ParseResponse((<-ch).GetResponse())
		if err != nil || r.Code != string(refusal.LockoutActive) {
			t.Errorf("a relayed sleeper answered %+v %v, want lockout-active", r, err)
		}
	}
	// Each command's result says it was stopped by the lockout, none that
	// it ran to its end, and each execution has an id of its own.
	ids := map[string]bool{}
	for _, m := range []int{1, 2, 3, 4} {
		rec := in.WaitAudit(t, func(r audit.Record) bool {
			return r.Event == "exec.result" && len(r.Argv) == 2 && r.Argv[1] == marker(m)
		})
		if rec.Decision != "refuse" || rec.Code != string(refusal.LockoutActive) {
			t.Errorf("sleep %s: result %s %s %q", marker(m), rec.Decision, rec.Code, rec.Reason)
		}
		if ids[rec.RequestID] {
			t.Errorf("two executions share request id %s", rec.RequestID)
		}
		ids[rec.RequestID] = true
	}
	if ids[localID] && ids[tailID] && len(ids) == 4 && !strings.Contains(strings.Join(keys(ids), ","), relayID) {
		return
	}
	t.Errorf("request ids %v: want the two Execs' own and two the server chose (never a relayed id)", keys(ids))
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
