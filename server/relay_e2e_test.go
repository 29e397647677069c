package server_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"coily.dev/coily/audit"
	"coily.dev/coily/client"
	"coily.dev/coily/descriptor"
	"coily.dev/coily/internal/testserver"
	coilyv1 "coily.dev/coily/proto/coily/v1"
	"coily.dev/coily/refusal"
	"coily.dev/coily/store"
)

const relayPolicy = `version: 1
limits: {concurrency: 4}
roles:
  operator:
    permissions: [exec, lockout, unlock, pause, resume, status, relay, keys]
    commands: ["*"]
    sandboxes: [demo, third]
  sandboxed:
    permissions: [exec]
    commands: [echo, sh, sleep]
grants:
  - principals: ["sandbox:demo", "sandbox:other"]
    roles: [sandboxed]
commands:
  - {name: echo, binary: /bin/echo, args: ["**"], flags: any, sandbox: native}
  - {name: sh, binary: /bin/sh, args: ["**"], flags: any, sandbox: native}
  - {name: sleep, binary: /bin/sleep, args: ["**"], sandbox: native}
`

// relayEnv is a server, its API and the demo sandbox's key.
type relayEnv struct {
	in  *testserver.Instance
	api client.API
	key []byte
}

func newRelayEnv(t *testing.T) *relayEnv {
	t.Helper()
	in := testserver.Start(t, testserver.Options{Policy: relayPolicy})
	e := &relayEnv{in: in, api: in.Client.API}
	k, err := e.api.IssueKey(context.Background(), &coilyv1.IssueKeyRequest{Sandbox: "demo"})
	if err != nil {
		t.Fatal(err)
	}
	e.key = k.GetKey().GetSecret()
	return e
}

// signed builds a signed request descriptor.
func (e *relayEnv) signed(t *testing.T, created time.Time, argv ...string) (id string, file []byte) {
	t.Helper()
	id = descriptor.NewID()
	file, err := descriptor.MarshalRequest(&descriptor.Request{ID: id, CreatedAt: created.UTC(), Nonce: hex.EncodeToString([]byte(id))[:32],
		Sandbox: "demo", Argv: argv}, e.key)
	if err != nil {
		t.Fatal(err)
	}
	return id, file
}

// relay relays a file and parses the response.
func (e *relayEnv) relay(t *testing.T, id string, file []byte) *descriptor.Response {
	t.Helper()
	resp, err := e.api.Relay(context.Background(), &coilyv1.RelayRequest{Sandbox: "demo", Id: id, Request: file})
	if err != nil {
		t.Fatalf("relay: %v", err)
	}
	r, err := descriptor.ParseResponse(resp.GetResponse())
	if err != nil {
		t.Fatalf("response: %v\n%s", err, resp.GetResponse())
	}
	return r
}

func wantRefused(t *testing.T, r *descriptor.Response, code refusal.Code) {
	t.Helper()
	if r.Outcome != descriptor.OutcomeRefused || r.Code != string(code) {
		t.Fatalf("response %s %s (%s), want refused %s", r.Outcome, r.Code, r.Message, code)
	}
}

func TestRelayRunsOnceAndAnswersRepeats(t *testing.T) {
	e := newRelayEnv(t)
	counter := filepath.Join(t.TempDir(), "runs")
	id, file := e.signed(t, time.Now(), "/bin/sh", "-c", "echo run >> "+counter+"; echo hi")
	r := e.relay(t, id, file)
	if r.Outcome != descriptor.OutcomeExit || r.StdoutText != "hi\n" || r.ID != id || r.AuditID == "" {
		t.Fatalf("first relay: %+v", r)
	}
	// The bridge relays again (it restarted before writing the answer):
	// same answer, byte for byte, and the command did not run again.
	again := e.relay(t, id, file)
	if again.StdoutText != "hi\n" || again.AuditID != r.AuditID {
		t.Fatalf("repeat: %+v", again)
	}
	if runs, _ := os.ReadFile(counter); strings.Count(string(runs), "run") != 1 {
		t.Fatalf("ran %d times", strings.Count(string(runs), "run"))
	}
	// The same id with another body is a replay.
	_, body2 := e.signedWithID(t, id, "/bin/echo", "different")
	wantRefused(t, e.relay(t, id, body2), refusal.ReplayDetected)
}

// signedWithID signs a request with a given id and a fresh nonce.
func (e *relayEnv) signedWithID(t *testing.T, id string, argv ...string) (string, []byte) {
	t.Helper()
	file, err := descriptor.MarshalRequest(&descriptor.Request{ID: id, CreatedAt: time.Now().UTC(), Nonce: descriptor.NewID()[:8] + strings.Repeat("n", 24),
		Sandbox: "demo", Argv: argv}, e.key)
	if err != nil {
		t.Fatal(err)
	}
	return id, file
}

func TestRelayRefusesHostileDescriptors(t *testing.T) {
	e := newRelayEnv(t)
	now := time.Now()
	t.Run("tampered body", func(t *testing.T) {
		id, file := e.signed(t, now, "/bin/echo", "hi")
		wantRefused(t, e.relay(t, id, []byte(strings.Replace(string(file), `"hi"`, `"ho"`, 1))), refusal.HMACFail)
	})
	t.Run("wrong key", func(t *testing.T) {
		id := descriptor.NewID()
		wrong := make([]byte, 32)
		file, _ := descriptor.MarshalRequest(&descriptor.Request{ID: id, CreatedAt: now.UTC(), Nonce: strings.Repeat("a", 32), Sandbox: "demo", Argv: []string{"/bin/echo"}}, wrong)
		wantRefused(t, e.relay(t, id, file), refusal.HMACFail)
	})
	t.Run("other sandbox's descriptor", func(t *testing.T) {
		id := descriptor.NewID()
		file, _ := descriptor.MarshalRequest(&descriptor.Request{ID: id, CreatedAt: now.UTC(), Nonce: strings.Repeat("b", 32), Sandbox: "other", Argv: []string{"/bin/echo"}}, e.key)
		wantRefused(t, e.relay(t, id, file), refusal.HMACFail)
	})
	t.Run("replayed nonce", func(t *testing.T) {
		id, file := e.signed(t, now, "/bin/echo", "1")
		e.relay(t, id, file)
		id2 := descriptor.NewID()
		file2, _ := descriptor.MarshalRequest(&descriptor.Request{ID: id2, CreatedAt: now.UTC(), Nonce: hex.EncodeToString([]byte(id))[:32], Sandbox: "demo", Argv: []string{"/bin/echo", "2"}}, e.key)
		wantRefused(t, e.relay(t, id2, file2), refusal.ReplayDetected)
	})
	t.Run("stale", func(t *testing.T) {
		id, file := e.signed(t, now.Add(-6*time.Minute), "/bin/echo")
		wantRefused(t, e.relay(t, id, file), refusal.StaleRequest)
	})
	t.Run("future", func(t *testing.T) {
		id, file := e.signed(t, now.Add(2*time.Minute), "/bin/echo")
		wantRefused(t, e.relay(t, id, file), refusal.StaleRequest)
	})
	t.Run("file named for another id", func(t *testing.T) {
		_, file := e.signed(t, now, "/bin/echo")
		wantRefused(t, e.relay(t, descriptor.NewID(), file), refusal.BadRequest)
	})
	t.Run("duplicate keys", func(t *testing.T) {
		id := descriptor.NewID()
		wantRefused(t, e.relay(t, id, []byte("version: 1\nversion: 1\n")), refusal.BadRequest)
	})
	t.Run("policy deny", func(t *testing.T) {
		id, file := e.signed(t, now, "/bin/cat", "/etc/passwd")
		wantRefused(t, e.relay(t, id, file), refusal.PolicyDeny)
	})
	// Still serving.
	id, file := e.signed(t, now, "/bin/echo", "still")
	if r := e.relay(t, id, file); r.StdoutText != "still\n" {
		t.Fatalf("after the corpus: %+v", r)
	}
}

func TestRelayNeedsPermissionForTheSandbox(t *testing.T) {
	e := newRelayEnv(t)
	_, err := e.api.Relay(context.Background(), &coilyv1.RelayRequest{Sandbox: "other", Id: descriptor.NewID(), Request: []byte("{}")})
	wantCode(t, refusal.FromStatus(err), refusal.PermissionDenied)
	_, err = e.api.Relay(context.Background(), &coilyv1.RelayRequest{Sandbox: "Bad/Name", Id: descriptor.NewID()})
	wantCode(t, refusal.FromStatus(err), refusal.BadRequest)
}

func TestRelayTeardownCancels(t *testing.T) {
	e := newRelayEnv(t)
	started := filepath.Join(t.TempDir(), "started")
	id, file := e.signed(t, time.Now(), "/bin/sh", "-c", "touch "+started+"; exec sleep 30")
	done := make(chan *descriptor.Response, 1)
	go func() { done <- e.relay(t, id, file) }()
	testserver.Poll(t, 10*time.Second, "the command to start", func() bool { _, err := os.Stat(started); return err == nil })
	td, err := descriptor.MarshalTeardown(&descriptor.Teardown{ID: id, CreatedAt: time.Now().UTC(), Nonce: strings.Repeat("t", 32), Sandbox: "demo"}, e.key)
	if err != nil {
		t.Fatal(err)
	}
	r, err := e.api.RelayTeardown(context.Background(), &coilyv1.RelayTeardownRequest{Sandbox: "demo", Id: id, Teardown: td})
	if err != nil || !r.GetCancelled() {
		t.Fatalf("teardown of a running request: %v %v", r, err)
	}
	select {
	case r := <-done:
		wantRefused(t, r, refusal.Internal)
		if !strings.Contains(r.Message, "teardown") {
			t.Fatalf("message: %s", r.Message)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("teardown did not end the request")
	}
}

func TestLockoutRotatesKeys(t *testing.T) {
	e := newRelayEnv(t)
	ctx := context.Background()
	if _, err := e.api.Lockout(ctx, &coilyv1.LockoutRequest{Reason: "test"}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.api.Unlock(ctx, &coilyv1.UnlockRequest{Reason: "test"}); err != nil {
		t.Fatal(err)
	}
	id, file := e.signed(t, time.Now(), "/bin/echo", "hi")
	wantRefused(t, e.relay(t, id, file), refusal.HMACFail)
	k, err := e.api.RotateKeys(ctx, &coilyv1.RotateKeysRequest{Sandbox: "demo"})
	if err != nil || k.GetKey().GetGeneration() != 3 {
		t.Fatalf("rotate: %v %v", k, err)
	}
	e.key = k.GetKey().GetSecret()
	id, file = e.signed(t, time.Now(), "/bin/echo", "hi")
	if r := e.relay(t, id, file); r.StdoutText != "hi\n" {
		t.Fatalf("after rotation: %+v", r)
	}
}

// A request accepted by a server that died is answered "interrupted" and
// never run again.
func TestRelayInterruptedByRestartIsNotRerun(t *testing.T) {
	e := newRelayEnv(t)
	counter := filepath.Join(t.TempDir(), "runs")
	id, file := e.signed(t, time.Now(), "/bin/sh", "-c", "echo run >> "+counter)
	e.in.Stop()
	// What a server killed mid-exec leaves: the request accepted by its
	// boot, no answer.
	_, canon, err := descriptor.ParseRequest(file)
	if err != nil {
		t.Fatal(err)
	}
	db, err := store.Open(filepath.Join(e.in.StateDir, "coily.db"))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := db.AcceptRelay(store.Relay{ID: id, Sandbox: "demo", BodyHash: sha256Hex(canon), State: store.RelayAccepted, Boot: "dead"}, "n", time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	db.Close()
	e.in = e.in.Restart(testserver.Options{Policy: relayPolicy})
	e.api = e.in.Client.API
	r := e.relay(t, id, file)
	wantRefused(t, r, refusal.Internal)
	if !strings.Contains(r.Message, "not run again") {
		t.Fatalf("message: %s", r.Message)
	}
	if _, err := os.Stat(counter); err == nil {
		t.Fatal("the interrupted request ran")
	}
}

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// A paused server refuses without recording: the same descriptor runs once
// the server resumes.
func TestRelayPauseIsNotRecorded(t *testing.T) {
	e := newRelayEnv(t)
	ctx := context.Background()
	id, file := e.signed(t, time.Now(), "/bin/echo", "later")
	if _, err := e.api.Pause(ctx, &coilyv1.PauseRequest{Reason: "test"}); err != nil {
		t.Fatal(err)
	}
	wantRefused(t, e.relay(t, id, file), refusal.PauseActive)
	if _, err := e.api.Resume(ctx, &coilyv1.ResumeRequest{Reason: "test"}); err != nil {
		t.Fatal(err)
	}
	if r := e.relay(t, id, file); r.StdoutText != "later\n" {
		t.Fatalf("after resume: %+v", r)
	}
}

// A teardown that reaches the server before its request is remembered:
// the request, relayed later, never runs.
func TestRelayTeardownBeforeRequest(t *testing.T) {
	e := newRelayEnv(t)
	counter := filepath.Join(t.TempDir(), "runs")
	id, file := e.signed(t, time.Now(), "/bin/sh", "-c", "echo run >> "+counter)
	td, err := descriptor.MarshalTeardown(&descriptor.Teardown{ID: id, CreatedAt: time.Now().UTC(), Nonce: strings.Repeat("t", 32), Sandbox: "demo"}, e.key)
	if err != nil {
		t.Fatal(err)
	}
	r, err := e.api.RelayTeardown(context.Background(), &coilyv1.RelayTeardownRequest{Sandbox: "demo", Id: id, Teardown: td})
	if err != nil || r.GetCancelled() {
		t.Fatalf("teardown: %v %v", r, err)
	}
	resp := e.relay(t, id, file)
	wantRefused(t, resp, refusal.Internal)
	if !strings.Contains(resp.Message, "teardown") {
		t.Fatalf("message: %s", resp.Message)
	}
	if _, err := os.Stat(counter); err == nil {
		t.Fatal("a torn-down request ran")
	}
}

// A teardown from another sandbox (of an id it should not know) neither
// cancels the request nor answers it as cancelled: the id is refused as
// used by another sandbox, and the command does not run.
func TestRelayTeardownFromAnotherSandbox(t *testing.T) {
	e := newRelayEnv(t)
	k, err := e.api.IssueKey(context.Background(), &coilyv1.IssueKeyRequest{Sandbox: "third"})
	if err != nil {
		t.Fatal(err)
	}
	counter := filepath.Join(t.TempDir(), "runs")
	id, file := e.signed(t, time.Now(), "/bin/sh", "-c", "echo run >> "+counter)
	td, err := descriptor.MarshalTeardown(&descriptor.Teardown{ID: id, CreatedAt: time.Now().UTC(), Nonce: strings.Repeat("3", 32), Sandbox: "third"}, k.GetKey().GetSecret())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.api.RelayTeardown(context.Background(), &coilyv1.RelayTeardownRequest{Sandbox: "third", Id: id, Teardown: td}); err != nil {
		t.Fatalf("teardown: %v", err)
	}
	resp := e.relay(t, id, file)
	wantRefused(t, resp, refusal.ReplayDetected)
	if !strings.Contains(resp.Message, "another sandbox") {
		t.Fatalf("message: %s", resp.Message)
	}
	if _, err := os.Stat(counter); err == nil {
		t.Fatal("the request ran")
	}
}

// confirmRequest signs a request of sandbox:demo that waits for a human's
// approval (requires_confirm).
func (e *relayEnv) confirmRequest(t *testing.T, argv ...string) (id string, file []byte) {
	t.Helper()
	id = descriptor.NewID()
	file, err := descriptor.MarshalRequest(&descriptor.Request{ID: id, CreatedAt: time.Now().UTC(), Nonce: hex.EncodeToString([]byte(id))[:32],
		Sandbox: "demo", Argv: argv, RequiresConfirm: true}, e.key)
	if err != nil {
		t.Fatal(err)
	}
	return id, file
}

// tearDown relays a teardown of id and reports whether it cancelled a
// request in flight.
func (e *relayEnv) tearDown(t *testing.T, id string) bool {
	t.Helper()
	td, err := descriptor.MarshalTeardown(&descriptor.Teardown{ID: id, CreatedAt: time.Now().UTC(),
		Nonce: strings.ReplaceAll(descriptor.NewID(), "-", ""), Sandbox: "demo"}, e.key)
	if err != nil {
		t.Fatal(err)
	}
	r, err := e.api.RelayTeardown(context.Background(), &coilyv1.RelayTeardownRequest{Sandbox: "demo", Id: id, Teardown: td})
	if err != nil {
		t.Fatalf("teardown: %v", err)
	}
	return r.GetCancelled()
}

// relayRawAsync relays a file in the background; its answer's bytes come
// on the channel.
func (e *relayEnv) relayRawAsync(t *testing.T, id string, file []byte) <-chan []byte {
	t.Helper()
	out := make(chan []byte, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		resp, err := e.api.Relay(ctx, &coilyv1.RelayRequest{Sandbox: "demo", Id: id, Request: file})
		if err != nil {
			t.Errorf("relay: %v", err)
		}
		out <- resp.GetResponse()
	}()
	return out
}

// wantTornDown checks the answer of a request torn down before its
// command started (docs/protocol.md §5): refused internal "cancelled by a
// teardown", no rule, naming its audited refusal, which names the
// approval it cancelled; the teardown is audited as having cancelled it.
// It returns the answer's bytes.
func wantTornDown(t *testing.T, e *relayEnv, id string, ch <-chan []byte, ap *coilyv1.Approval) []byte {
	t.Helper()
	var got []byte
	select {
	case got = <-ch:
	case <-time.After(30 * time.Second):
		t.Fatal("the teardown did not end the request")
	}
	r, err := descriptor.ParseResponse(got)
	if err != nil {
		t.Fatalf("%v: %s", err, got)
	}
	if r.Code != string(refusal.Internal) || r.Message != "cancelled by a teardown" || r.Rule != "" || r.DurationMS != 0 {
		t.Fatalf("answer %s", got)
	}
	wantAudited(t, e.in, id, r)
	rec := e.in.WaitAudit(t, func(a audit.Record) bool { return a.ID == r.AuditID })
	if rec.Event != "exec.decision" || rec.Details["approval_id"] != ap.GetId() {
		t.Fatalf("the refusal's record %+v, want an exec.decision naming approval %s", rec, ap.GetId())
	}
	e.in.WaitAudit(t, func(a audit.Record) bool {
		return a.Event == "relay.teardown" && a.RelayID == id && a.Details["cancelled"] == "true"
	})
	return got
}

// A teardown of a request waiting for a human's approval wins: the
// approval is cancelled, the command never runs, a later approve finds
// nothing to approve, and the answer is recorded.
func TestRelayTeardownWhileAwaitingApproval(t *testing.T) {
	e := newFairEnv(t, "{concurrency: 2}", 0)
	marker := filepath.Join(t.TempDir(), "ran")
	id, file := e.confirmRequest(t, "/bin/sh", "-c", "touch "+marker)
	answer := e.relayRawAsync(t, id, file)
	ap := pendingApproval(t, e)
	if !e.tearDown(t, id) {
		t.Fatal("the teardown of a request waiting for approval says it cancelled nothing")
	}
	got := wantTornDown(t, e, id, answer, ap)
	rec := e.in.WaitAudit(t, func(a audit.Record) bool { return a.RelayID == id && a.Event == "exec.decision" })
	if rec.Details["approval_state"] != coilyv1.ApprovalState_APPROVAL_STATE_CANCELLED.String() {
		t.Fatalf("approval state in the refusal: %+v", rec.Details)
	}
	if l, err := e.api.ListApprovals(context.Background(), &coilyv1.ListApprovalsRequest{}); err != nil || len(l.GetApprovals()) != 0 {
		t.Fatalf("approvals still pending: %v %v", l, err)
	}
	_, err := e.api.Decide(context.Background(), &coilyv1.DecideRequest{Id: ap.GetId(), Verdict: coilyv1.Verdict_VERDICT_APPROVE})
	wantCode(t, refusal.FromStatus(err), refusal.BadRequest)
	if again := e.relayRaw(t, id, file); !bytes.Equal(again, got) {
		t.Fatalf("relayed again:\n%s\nwant\n%s", again, got)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the torn-down request ran")
	}
}

// A teardown of an approved request queued for a concurrency slot wins:
// it leaves the queue, never runs, and the slot freed later goes to
// whoever asks next.
func TestRelayTeardownWhileQueuedForASlot(t *testing.T) {
	e := newFairEnv(t, "{concurrency: 1}", 0)
	dir := t.TempDir()
	marker, release := filepath.Join(dir, "ran"), filepath.Join(dir, "release")
	long := startRunning(t, e.in, "/bin/sh", "-c", "echo go; while [ ! -e "+release+" ]; do sleep 0.01; done")
	id, file := e.confirmRequest(t, "/bin/sh", "-c", "touch "+marker)
	answer := e.relayRawAsync(t, id, file)
	ap := pendingApproval(t, e)
	approve(t, e, ap.GetId())
	if !e.tearDown(t, id) {
		t.Fatal("the teardown of a queued request says it cancelled nothing")
	}
	wantTornDown(t, e, id, answer, ap)
	touch(t, release)
	if r := <-long; r.err != nil {
		t.Fatal(r.err)
	}
	if r := execArgv(t, e.in, "/bin/echo", "next"); r.err != nil || r.stdout != "next\n" {
		t.Fatalf("the freed slot did not go to the next request: %+v", r)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the torn-down request ran")
	}
}
