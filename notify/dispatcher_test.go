package notify_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"coily.dev/coily/internal/canary"
	"coily.dev/coily/internal/poll"
	"coily.dev/coily/internal/standin"
	"coily.dev/coily/notify"
)

const console = "https://coily.example-tailnet.ts.net"

// leaks fails t if any secret, or the argv's secret, is in v's JSON, in
// any form internal/canary looks for.
func leaks(t testing.TB, what string, v any, secrets ...string) {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	c := canary.New(t)
	for _, s := range append(secrets, ntfyToken, webhookKey) {
		c.AddString(s, s) // test values, safe to name
	}
	c.CheckText(what, string(b))
}

func TestNtfyApproval(t *testing.T) {
	ks, _ := fileKeystore(t)
	srv := standin.NtfyServer(t, ntfyToken)
	sub := standin.Subscribe(t, srv.URL, "coily", ntfyToken)
	d, reg := start(t, notify.Config{Keystore: ks, ConsoleURL: "https://ignored.example"})
	d.Configure(notifyBlock(t, "  console_url: "+console+"/\n  ntfy: {url: \""+srv.URL+"\", topic: coily, token: \"file:ntfy\"}\n"))
	d.Notify(approvalEvent("gh", "repo", "delete", "alice/private", "--token=ghp_ARGVSECRET"))
	m := sub.Next(t, 5*time.Second)
	const id = "0123456789abcdef0123456789abcdef"
	if m.Title != "coily: approval waiting: gh-repo-delete" || m.Priority != 4 || m.Click != console+"/approvals/"+id {
		t.Errorf("message %+v", m)
	}
	if !regexp.MustCompile(`^tag:agent asks to run rule gh-repo-delete\.\nApproval ` + id + ` expires in (4m5\ds|5m0s)\.$`).MatchString(m.Message) {
		t.Errorf("message %q", m.Message)
	}
	want := []standin.NtfyAction{
		{Action: "view", Label: "Open", URL: console + "/approvals/" + id},
		{Action: "http", Label: "Approve", URL: console + "/api/approvals/" + id + "/approve", Method: "POST", Clear: true},
		{Action: "http", Label: "Deny", URL: console + "/api/approvals/" + id + "/deny", Method: "POST", Clear: true},
	}
	if len(m.Actions) != len(want) {
		t.Fatalf("actions %+v", m.Actions)
	}
	for i, a := range m.Actions {
		a.ID = ""
		if a.Action != want[i].Action || a.Label != want[i].Label || a.URL != want[i].URL || a.Method != want[i].Method ||
			a.Clear != want[i].Clear || a.Body != "" || len(a.Headers) != 0 {
			t.Errorf("action %d = %+v, want %+v", i, a, want[i])
		}
	}
	leaks(t, "ntfy message", m, "ghp_ARGVSECRET", "alice/private")
	sent(t, reg, "ntfy", 1)
}

func TestNtfyIncludeArgvAndNoConsole(t *testing.T) {
	srv := standin.NtfyServer(t, "")
	sub := standin.Subscribe(t, srv.URL, "coily", "")
	d, _ := start(t, notify.Config{})
	d.Configure(notifyBlock(t, "  include_argv: true\n  ntfy: {url: \""+srv.URL+"\", topic: coily}\n"))
	d.Notify(approvalEvent("gh", "issue", "create", "--title", "a b\nc"))
	m := sub.Next(t, 5*time.Second)
	if !strings.Contains(m.Message, `$ gh issue create --title "a b\nc"`) {
		t.Errorf("argv missing or unquoted: %q", m.Message)
	}
	// No console known: no link, no buttons; the message says how to decide.
	const id = "0123456789abcdef0123456789abcdef"
	if m.Click != "" || len(m.Actions) != 0 ||
		!strings.Contains(m.Message, "\nApprove: coily approvals approve "+id+"\nDeny: coily approvals deny "+id) {
		t.Errorf("without a console: %+v", m)
	}
}

// TestStopsWithAndWithoutConsole: a lockout or a pause links the console
// when one is served, and otherwise names the command that lifts it,
// with no button that would lead nowhere.
func TestStopsWithAndWithoutConsole(t *testing.T) {
	for _, tc := range []struct {
		kind    notify.Kind
		command string
	}{{notify.KindLockout, "Unlock: coily unlock"}, {notify.KindPause, "Resume: coily resume"}} {
		for _, url := range []string{"", console} {
			srv := standin.NtfyServer(t, "")
			sub := standin.Subscribe(t, srv.URL, "coily", "")
			d, _ := start(t, notify.Config{ConsoleURL: url})
			d.Configure(notifyBlock(t, "  events: [lockout, pause]\n  ntfy: {url: \""+srv.URL+"\", topic: coily}\n"))
			d.Notify(notify.Event{Kind: tc.kind, Stop: &notify.Stop{By: "alice"}})
			m := sub.Next(t, 5*time.Second)
			hasCommand := strings.HasSuffix(m.Message, "\n"+tc.command)
			if url == "" && (m.Click != "" || len(m.Actions) != 0 || !hasCommand) {
				t.Errorf("%s without a console: %+v", tc.kind, m)
			}
			if url != "" && (m.Click != console+"/" || len(m.Actions) != 1 || m.Actions[0].URL != console+"/" || hasCommand) {
				t.Errorf("%s with a console: %+v", tc.kind, m)
			}
		}
	}
}

// TestHostileText: principals and reasons with line breaks, control and
// formatting characters cannot add lines, headers or hidden text.
func TestHostileText(t *testing.T) {
	ks, _ := fileKeystore(t)
	srv := standin.NtfyServer(t, "")
	sub := standin.Subscribe(t, srv.URL, "coily", "")
	rcv := newReceiver(t)
	d, _ := start(t, notify.Config{Keystore: ks, ConsoleURL: console})
	d.Configure(notifyBlock(t, "  events: [lockout]\n  ntfy: {url: \""+srv.URL+"\", topic: coily}\n  webhook: {url: \""+rcv.URL+"\", secret: \"file:webhook\"}\n"))
	by := "evil\r\nX-Injected: yes\u202e\x1b[2J"
	d.Notify(notify.Event{Kind: notify.KindLockout, Stop: &notify.Stop{By: by, Reason: "because\nFAKE LINE\u2028", Killed: 2, Rejected: 1}})
	m := sub.Next(t, 5*time.Second)
	if strings.Count(m.Message, "\n") != 1 || strings.ContainsAny(m.Message+m.Title, "\r\x1b\u202e\u2028") ||
		!strings.Contains(m.Message, "Locked out by evil??X-Injected: yes??[2J: because?FAKE LINE?.") || m.Priority != 5 {
		t.Errorf("message %q", m.Message)
	}
	p := rcv.next(t, 5*time.Second)
	raw := rcv.last()
	if p.Lockout == nil || p.Lockout.By != by || p.Lockout.Killed != 2 || p.Lockout.ApprovalsRejected != 1 || p.Message != m.Message {
		t.Errorf("payload %+v", p)
	}
	for k := range raw.h {
		if strings.Contains(strings.ToLower(k), "injected") {
			t.Errorf("header %q forged", k)
		}
	}
	leaks(t, "webhook body", string(raw.body))
}

// TestWebhookSigned: the receiver accepts the signed delivery and refuses
// it tampered, replayed, or late.
func TestWebhookSigned(t *testing.T) {
	ks, _ := fileKeystore(t)
	rcv := newReceiver(t)
	d, reg := start(t, notify.Config{Keystore: ks, ConsoleURL: console})
	d.Configure(notifyBlock(t, "  webhook: {url: \""+rcv.URL+"\", secret: \"file:webhook\"}\n"))
	d.Notify(approvalEvent("rm", "-rf", "/srv/SECRETPATH"))
	p := rcv.next(t, 5*time.Second)
	a := p.Approval
	if p.Version != 1 || p.Event != notify.EventApproval || p.ID == "" || a == nil || a.ID != "0123456789abcdef0123456789abcdef" ||
		a.Rule != "gh-repo-delete" || a.Requester != "tag:agent" || a.Argv != nil || a.ApproveURL != console+"/api/approvals/"+a.ID+"/approve" ||
		p.URL != console+"/approvals/"+a.ID {
		t.Fatalf("payload %+v %+v", p, a)
	}
	raw := rcv.last()
	leaks(t, "webhook body", string(raw.body), "SECRETPATH")
	if code := rcv.replay(t, raw); code != http.StatusUnauthorized {
		t.Errorf("replay: %d", code)
	}
	tampered := rawRequest{raw.h, []byte(strings.Replace(string(raw.body), "tag:agent", "tag:owner", 1))}
	if code := rcv.replay(t, tampered); code != http.StatusUnauthorized {
		t.Errorf("tampered: %d", code)
	}
	rcv.V.Now = func() time.Time { return time.Now().Add(notify.DefaultTolerance + time.Minute) }
	if code := rcv.replay(t, raw); code != http.StatusUnauthorized {
		t.Errorf("late: %d", code)
	}
	rcv.mu.Lock()
	errs := rcv.refusals
	rcv.mu.Unlock()
	if len(errs) != 3 || !errors.Is(errs[0], notify.ErrReplay) || !errors.Is(errs[1], notify.ErrBadSignature) || !errors.Is(errs[2], notify.ErrStale) {
		t.Errorf("refusals %v", errs)
	}
	sent(t, reg, "webhook", 1)
}

// TestRetries: 5xx is retried with backoff; 4xx is not.
func TestRetries(t *testing.T) {
	srv := standin.NtfyServer(t, "")
	sub := standin.Subscribe(t, srv.URL, "coily", "")
	d, reg := start(t, notify.Config{Attempts: 3})
	d.Configure(notifyBlock(t, "  ntfy: {url: \""+srv.URL+"\", topic: coily}\n"))
	srv.FailNext(503, 502)
	d.Notify(approvalEvent())
	sub.Next(t, 5*time.Second)
	if n := srv.Attempts(); n != 3 {
		t.Errorf("attempts = %d, want 3", n)
	}
	sent(t, reg, "ntfy", 1)
	if r := count(t, reg, "ntfy", "retries"); r != 2 {
		t.Errorf("retries %v", r)
	}
	srv.FailNext(400)
	d.Notify(approvalEvent())
	poll.Until(t, 5*time.Second, "the failure to be counted", func() bool { return count(t, reg, "ntfy", "failed") == 1 })
	if n := srv.Attempts(); n != 4 {
		t.Errorf("attempts = %d, want 4 (no retry after 400)", n)
	}
	srv.FailNext(500, 500, 500)
	d.Notify(approvalEvent())
	poll.Until(t, 5*time.Second, "the failure to be counted", func() bool { return count(t, reg, "ntfy", "failed") == 2 })
	if n := srv.Attempts(); n != 7 {
		t.Errorf("attempts = %d, want 7 (three tries)", n)
	}
}

// TestTimeoutAndQueue: a sink that does not answer times each attempt
// out; meanwhile Notify does not block, and events past the queue's size
// are dropped and counted.
func TestTimeoutAndQueue(t *testing.T) {
	srv := standin.NtfyServer(t, "")
	release := srv.Block()
	defer release()
	d, reg := start(t, notify.Config{QueueSize: 2, Attempts: 2, Timeout: 300 * time.Millisecond})
	d.Configure(notifyBlock(t, "  ntfy: {url: \""+srv.URL+"\", topic: coily}\n"))
	d.Notify(approvalEvent())
	poll.Until(t, 5*time.Second, "the first attempt", func() bool { return srv.Attempts() == 1 })
	t0 := time.Now()
	for range 9 {
		d.Notify(approvalEvent())
	}
	if took := time.Since(t0); took > 100*time.Millisecond {
		t.Errorf("9 Notify calls took %s with the sink stuck", took)
	}
	if got := count(t, reg, "ntfy", "dropped"); got != 7 {
		t.Errorf("dropped = %v, want 7 (1 in flight, 2 queued)", got)
	}
	poll.Until(t, 10*time.Second, "the first delivery to time out twice", func() bool { return count(t, reg, "ntfy", "failed") >= 1 })
	if n := srv.Attempts(); n < 2 {
		t.Errorf("attempts = %d", n)
	}
	release()
	poll.Until(t, 10*time.Second, "the queued two", func() bool {
		return count(t, reg, "ntfy", "failed")+count(t, reg, "ntfy", "sent") == 3
	})
}

// TestSecretAfterKeystoreLoss: the token read when the policy was put in
// force still serves when the keystore cannot answer (a lockout that
// revoked coily's Vault token must still be notified).
func TestSecretAfterKeystoreLoss(t *testing.T) {
	ks, path := fileKeystore(t)
	srv := standin.NtfyServer(t, ntfyToken)
	sub := standin.Subscribe(t, srv.URL, "coily", ntfyToken)
	d, reg := start(t, notify.Config{Keystore: ks})
	d.Configure(notifyBlock(t, "  ntfy: {url: \""+srv.URL+"\", topic: coily, token: \"file:ntfy\"}\n"))
	// Configure read the token in the background; an event queued after
	// it is delivered after that read.
	d.Notify(notify.Event{Kind: notify.KindLockout, Stop: &notify.Stop{By: "tag:owner"}})
	sub.Next(t, 5*time.Second)
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	d.Notify(notify.Event{Kind: notify.KindLockout, Stop: &notify.Stop{By: "tag:owner"}})
	if m := sub.Next(t, 5*time.Second); m.Title != "coily: LOCKED OUT" {
		t.Errorf("message %+v", m)
	}
	// A dispatcher that never read it fails, and says so in the metrics.
	d2, reg2 := start(t, notify.Config{Keystore: ks, Attempts: 1})
	d2.Configure(notifyBlock(t, "  ntfy: {url: \""+srv.URL+"\", topic: coily, token: \"file:ntfy\"}\n"))
	d2.Notify(notify.Event{Kind: notify.KindLockout, Stop: &notify.Stop{By: "tag:owner"}})
	poll.Until(t, 5*time.Second, "the failure", func() bool { return count(t, reg2, "ntfy", "failed") == 1 })
	sent(t, reg, "ntfy", 2)
}

// TestRefusalsOncePerWindow: a caller's refusals notify once when they
// reach the count, not once per refusal; lockout-active and pause-active
// refusals are not counted; events the policy does not name are not sent.
func TestRefusalsOncePerWindow(t *testing.T) {
	srv := standin.NtfyServer(t, "")
	sub := standin.Subscribe(t, srv.URL, "coily", "")
	d, _ := start(t, notify.Config{})
	d.Configure(notifyBlock(t, "  events: [refusals, lockout]\n  refusals: {count: 5, window: 1m}\n  ntfy: {url: \""+srv.URL+"\", topic: coily}\n"))
	refuse := func(caller, code string) {
		d.Notify(notify.Event{Kind: notify.KindRefusal, Refusal: &notify.Refusal{Caller: caller, Code: code}})
	}
	for range 10 {
		refuse("tag:agent", "lockout-active")
	}
	for range 4 {
		refuse("tag:agent", "policy-deny")
	}
	refuse("tag:other", "policy-deny")
	d.Notify(approvalEvent()) // not among the events
	for range 30 {
		refuse("tag:agent", "rate-limit")
	}
	d.Notify(notify.Event{Kind: notify.KindLockout, Stop: &notify.Stop{By: "tag:owner"}}) // the marker
	m := sub.Next(t, 5*time.Second)
	if m.Title != "coily: repeated refusals" || !strings.Contains(m.Message, "tag:agent was refused 5 times in") ||
		!strings.Contains(m.Message, "(policy-deny=4, rate-limit=1)") {
		t.Errorf("first message %+v", m)
	}
	if m := sub.Next(t, 5*time.Second); m.Title != "coily: LOCKED OUT" {
		t.Errorf("second message %q: want the marker, nothing between", m.Title)
	}
}
