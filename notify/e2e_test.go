package notify_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"coily.dev/coily/internal/standin"
	"coily.dev/coily/internal/testserver"
	"coily.dev/coily/notify"
	coilyv1 "coily.dev/coily/proto/coily/v1"
)

const e2ePolicy = `version: 1
limits: {concurrency: 4}
roles:
  operator:
    permissions: [exec, lockout, unlock, pause, resume, status, approve]
    commands: [echo, confirm-true]
commands:
  - {name: confirm-true, binary: /bin/true, args: ["**"], flags: any, sandbox: native, confirm: true, confirm_timeout: 2m}
  - {name: echo, binary: /bin/echo, args: ["**"], flags: any, sandbox: native}
notify:
  console_url: https://coily.example-tailnet.ts.net
  refusals: {count: 5, window: 1m}
  ntfy: {url: "NTFY", topic: coily, token: "file:ntfy"}
  webhook: {url: "HOOK", secret: "file:webhook"}
`

// TestServerNotifies runs a whole server with a dispatcher: a waiting
// approval reaches the phone's topic and the webhook within a second,
// with its id and buttons and without the argv; a flood of refusals
// makes one notification; a lockout makes one.
func TestServerNotifies(t *testing.T) {
	ks, _ := fileKeystore(t)
	ntfy := standin.NtfyServer(t, ntfyToken)
	rcv := newReceiver(t)
	d, reg := start(t, notify.Config{Keystore: ks})
	pol := strings.NewReplacer("NTFY", ntfy.URL, "HOOK", rcv.URL).Replace(e2ePolicy)
	in := testserver.Start(t, testserver.Options{Policy: pol, Keystore: ks, Notifier: d})
	sub := standin.Subscribe(t, ntfy.URL, "coily", ntfyToken)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	stream, err := in.Client.API.Exec(ctx, &coilyv1.ExecRequest{Argv: []string{"/bin/true", "--secret-arg=ARGV_SECRET"}})
	if err != nil {
		t.Fatal(err)
	}
	first, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	id := first.GetApproval().GetId()
	if id == "" {
		t.Fatalf("first event %v, want the approval", first)
	}
	m := sub.Next(t, 5*time.Second)
	took := time.Since(t0)
	if took > time.Second {
		t.Errorf("the approval's notification took %s", took)
	}
	t.Logf("approval %s notified through ntfy %s after the Exec saw it", id, took.Round(time.Millisecond))
	if !strings.Contains(m.Message, "asks to run rule confirm-true.\nApproval "+id+" expires in") || len(m.Actions) != 3 ||
		m.Actions[1].URL != "https://coily.example-tailnet.ts.net/api/approvals/"+id+"/approve" {
		t.Errorf("ntfy message %+v", m)
	}
	leaks(t, "ntfy message", m, "ARGV_SECRET")
	p := rcv.next(t, 5*time.Second)
	if p.Event != notify.EventApproval || p.Approval.ID != id || p.Approval.Rule != "confirm-true" || p.Approval.Argv != nil {
		t.Errorf("webhook payload %+v", p)
	}
	leaks(t, "webhook body", string(rcv.last().body), "ARGV_SECRET")

	// A flood: 30 refused Execs (no rule for /bin/ls) make one notification.
	for range 30 {
		if _, err := in.Client.Exec(ctx, &coilyv1.ExecRequest{Argv: []string{"/bin/ls"}}, nil, nil); err == nil {
			t.Fatal("ls ran")
		}
	}
	m = sub.Next(t, 5*time.Second)
	if m.Title != "coily: repeated refusals" || !strings.Contains(m.Message, "was refused 5 times in") ||
		!strings.Contains(m.Message, "(policy-deny=5)") {
		t.Errorf("refusals message %+v", m)
	}

	// Lockout: rejects the approval (its refusal is not counted) and
	// notifies, next after the one refusals message.
	if _, err := in.Client.API.Lockout(ctx, &coilyv1.LockoutRequest{Reason: "test over"}); err != nil {
		t.Fatal(err)
	}
	m = sub.Next(t, 5*time.Second)
	if m.Title != "coily: LOCKED OUT" || !strings.Contains(m.Message, ": test over.\n0 running commands killed, 1 waiting approvals rejected.") || m.Priority != 5 {
		t.Errorf("lockout message %+v", m)
	}
	if _, err := stream.Recv(); err == nil {
		t.Error("the waiting Exec was not refused")
	}
	for _, want := range []string{notify.EventRefusals, notify.EventLockout} {
		if p := rcv.next(t, 5*time.Second); p.Event != want {
			t.Errorf("webhook event %q, want %q", p.Event, want)
		}
	}
	sent(t, reg, "ntfy", 3)
	sent(t, reg, "webhook", 3)
	in.Stop()
}
