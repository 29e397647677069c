package server

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"coily.dev/coily/access"
	"coily.dev/coily/audit"
	"coily.dev/coily/descriptor"
	coilyv1 "coily.dev/coily/proto/coily/v1"
	"coily.dev/coily/refusal"
)

const teardownPolicy = `version: 1
roles:
  operator:
    permissions: [exec, pause, resume, relay, keys]
    commands: ["*"]
    sandboxes: [demo]
  sandboxed:
    permissions: [exec]
    commands: [sh]
grants:
  - principals: ["sandbox:demo"]
    roles: [sandboxed]
commands:
  - {name: sh, binary: /bin/sh, args: ["**"], flags: any, sandbox: native, rate: {per_minute: 600, burst: 100}}
`

// gatedClock is the server's clock, which can hold the next reading a
// given function of the server or its relayer (package relay) makes. A
// relayed request reads it in answerOnce
// at its freshness check (row 12 of docs/protocol.md §7.3), after it is
// in flight and before it is accepted; in takeToken when its rule has a
// rate limit, in the pipeline before its command is readied; a teardown
// reads it in tombstone, as it records a teardown that came first.
type gatedClock struct {
	mu      sync.Mutex
	in      string // the function whose next reading is held; "" when none
	reached chan struct{}
	release chan struct{}
}

func (c *gatedClock) now() time.Time {
	// The reader is the caller, or its caller when the clock is read
	// through the server's (package relay reads s.cfg.Now by a closure).
	var callers []string
	for skip := 1; skip <= 2; skip++ {
		if pc, _, _, ok := runtime.Caller(skip); ok {
			callers = append(callers, runtime.FuncForPC(pc).Name())
		}
	}
	c.mu.Lock()
	hold := c.in != "" && slices.ContainsFunc(callers, func(f string) bool {
		return strings.HasSuffix(f, ".(*Server)."+c.in) || strings.HasSuffix(f, ".(*Relayer)."+c.in)
	})
	if hold {
		c.in = ""
	}
	c.mu.Unlock()
	if hold {
		close(c.reached)
		<-c.release
	}
	return time.Now()
}

// arm makes the next reading by the server's method fn wait for release.
func (c *gatedClock) arm(fn string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.in, c.reached, c.release = fn, make(chan struct{}), make(chan struct{})
}

type teardownEnv struct {
	s     *Server
	clock *gatedClock
	ctx   context.Context // the operator, who relays for demo
	key   []byte
	// holding names the method whose clock reading the test holds.
	holding string
}

func newTeardownEnv(t *testing.T) *teardownEnv {
	t.Helper()
	s := newUnitServer(t, teardownPolicy)
	e := &teardownEnv{s: s, clock: &gatedClock{}}
	s.cfg.Now = e.clock.now // before anything runs on it
	e.ctx = access.WithCall(context.Background(), access.Caller{Principal: "local:root", Transport: access.TransportLocal, Roles: []string{"operator"}}, s.Policy())
	k, err := s.IssueKey(e.ctx, &coilyv1.IssueKeyRequest{Sandbox: "demo"})
	if err != nil {
		t.Fatal(err)
	}
	e.key = k.GetKey().GetSecret()
	return e
}

func (e *teardownEnv) teardown(t *testing.T, id string) bool {
	t.Helper()
	td, err := descriptor.MarshalTeardown(&descriptor.Teardown{ID: id, CreatedAt: time.Now().UTC(),
		Nonce: strings.ReplaceAll(descriptor.NewID(), "-", ""), Sandbox: "demo"}, e.key)
	if err != nil {
		t.Fatal(err)
	}
	r, err := e.s.RelayTeardown(e.ctx, &coilyv1.RelayTeardownRequest{Sandbox: "demo", Id: id, Teardown: td})
	if err != nil {
		t.Fatalf("teardown: %v", err)
	}
	return r.GetCancelled()
}

func (e *teardownEnv) relay(t *testing.T, id string, file []byte) []byte {
	t.Helper()
	r, err := e.s.Relay(e.ctx, &coilyv1.RelayRequest{Sandbox: "demo", Id: id, Request: file})
	if err != nil {
		t.Fatalf("relay: %v", err)
	}
	return r.GetResponse()
}

// hold arms the clock to hold the next reading of the server's method
// fn, released by let or, at the latest, when the test ends.
func (e *teardownEnv) hold(t *testing.T, fn string) {
	t.Helper()
	e.clock.arm(fn)
	e.holding = fn
	release := e.clock.release
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})
}

// held waits until the reading is held.
func (e *teardownEnv) held(t *testing.T) {
	t.Helper()
	select {
	case <-e.clock.reached:
	case <-time.After(10 * time.Second):
		t.Fatalf("the server never read its clock in %s", e.holding)
	}
}

// heldRelay relays file with the request held where the server's method
// fn reads the clock, and returns its answer to come.
func (e *teardownEnv) heldRelay(t *testing.T, fn, id string, file []byte) <-chan []byte {
	t.Helper()
	e.hold(t, fn)
	out := make(chan []byte, 1)
	go func() {
		r, err := e.s.Relay(e.ctx, &coilyv1.RelayRequest{Sandbox: "demo", Id: id, Request: file})
		if err != nil {
			t.Errorf("relay: %v", err)
		}
		out <- r.GetResponse()
	}()
	e.held(t)
	return out
}

func (e *teardownEnv) let(t *testing.T) {
	t.Helper()
	close(e.clock.release)
}

func answer(t *testing.T, ch <-chan []byte) []byte {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(30 * time.Second):
		t.Fatal("no answer")
		return nil
	}
}

func (e *teardownEnv) sign(t *testing.T, argv ...string) (string, []byte) {
	t.Helper()
	id := descriptor.NewID()
	file, err := descriptor.MarshalRequest(&descriptor.Request{ID: id, CreatedAt: time.Now().UTC(),
		Nonce: strings.ReplaceAll(descriptor.NewID(), "-", ""), Sandbox: "demo", Argv: argv}, e.key)
	if err != nil {
		t.Fatal(err)
	}
	return id, file
}

func auditRecords(t *testing.T, s *Server) []audit.Record {
	t.Helper()
	recs, err := audit.Tail(filepath.Join(filepath.Dir(s.cfg.Local.Path()), "audit"), 1000)
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

// wantTornDown checks the answer of a request torn down before its
// command started: refused internal "cancelled by a teardown", no rule,
// naming the audit record of its refusal; no record allows it; the
// teardown is audited as having cancelled it. It returns the refusal's
// record.
func wantTornDown(t *testing.T, e *teardownEnv, id string, got []byte) audit.Record {
	t.Helper()
	r, err := descriptor.ParseResponse(got)
	if err != nil {
		t.Fatalf("%v: %s", err, got)
	}
	if r.Outcome != descriptor.OutcomeRefused || r.Code != string(refusal.Internal) || r.Message != "cancelled by a teardown" ||
		r.Rule != "" || r.DurationMS != 0 || r.AuditID == "" {
		t.Fatalf("answer %s", got)
	}
	var refused *audit.Record
	torn := false
	for _, a := range auditRecords(t, e.s) {
		switch {
		case a.ID == r.AuditID:
			refused = &a
		case a.Event == "relay.teardown" && a.RelayID == id:
			torn = a.Decision == "allow" && a.Details["cancelled"] == "true" && a.Details["sandbox"] == "demo"
		case a.RelayID == id && a.Decision == "allow":
			t.Fatalf("a torn-down request was allowed: %+v", a)
		}
	}
	if refused == nil || refused.Event != "exec.decision" || refused.Decision != "refuse" || refused.Code != r.Code || refused.RelayID != id {
		t.Fatalf("audit_id %s names %+v, not the refusal of %s", r.AuditID, refused, id)
	}
	if !torn {
		t.Fatal("the teardown is not audited as having cancelled the request")
	}
	return *refused
}

// beforeItStarted is the recorded answer of a request torn down before
// it was accepted (docs/protocol.md §5).
func beforeItStarted(id string) string {
	return `{"code":"internal","duration_ms":0,"id":"` + id + `","message":"cancelled by a teardown before it started","outcome":"refused","version":1}` + "\n"
}

// wantNotAllowed checks that nothing in the audit log allowed request id
// and that its teardown is audited, as having cancelled it or not.
func wantNotAllowed(t *testing.T, e *teardownEnv, id string, cancelled bool) {
	t.Helper()
	torn := false
	for _, a := range auditRecords(t, e.s) {
		switch {
		case a.Event == "relay.teardown" && a.RelayID == id:
			torn = a.Decision == "allow" && a.Details["cancelled"] == fmt.Sprint(cancelled) && a.Details["sandbox"] == "demo"
		case a.RelayID == id && a.Decision == "allow":
			t.Fatalf("a torn-down request was allowed: %+v", a)
		}
	}
	if !torn {
		t.Fatalf("the teardown of %s is not audited with cancelled=%v", id, cancelled)
	}
}

// A teardown that reaches a request after it is in flight but before it
// is accepted (rows 10–15 of docs/protocol.md §7.3: nothing runs yet to
// cancel) still wins, as one that came first: the request never starts,
// and its id is recorded as answered "cancelled by a teardown before it
// started".
func TestRelayTeardownWhileChecked(t *testing.T) {
	e := newTeardownEnv(t)
	marker := filepath.Join(t.TempDir(), "ran")
	id, file := e.sign(t, "/bin/sh", "-c", "touch "+marker)
	held := e.heldRelay(t, "answerOnce", id, file)
	if !e.teardown(t, id) {
		t.Error("the teardown of a request in flight says it cancelled nothing")
	}
	e.let(t)
	got := answer(t, held)
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the torn-down request ran")
	}
	if string(got) != beforeItStarted(id) {
		t.Fatalf("answer:\n got %s\nwant %s", got, beforeItStarted(id))
	}
	wantNotAllowed(t, e, id, true)
	// The id is used up: relayed again, the same answer, byte for byte.
	if again := e.relay(t, id, file); !bytes.Equal(again, got) {
		t.Fatalf("relayed again:\n%s\nwant\n%s", again, got)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the torn-down request ran when relayed again")
	}
}

// A request relayed while a teardown that came first is being recorded
// (the teardown found nothing in flight, its record is not written yet)
// never runs either: it gets the teardown's answer.
func TestRelayWhileATeardownIsRecorded(t *testing.T) {
	e := newTeardownEnv(t)
	marker := filepath.Join(t.TempDir(), "ran")
	id, file := e.sign(t, "/bin/sh", "-c", "touch "+marker)
	e.hold(t, "tombstone")
	cancelled := make(chan bool, 1)
	go func() { cancelled <- e.teardown(t, id) }()
	e.held(t)
	got := e.relay(t, id, file)
	e.let(t)
	if c := <-cancelled; c {
		t.Error("a teardown that found nothing in flight says it cancelled a request")
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the torn-down request ran")
	}
	if string(got) != beforeItStarted(id) {
		t.Fatalf("answer:\n got %s\nwant %s", got, beforeItStarted(id))
	}
	wantNotAllowed(t, e, id, false)
}

// A teardown that reaches a request in the pipeline at a step that does
// not wait (here its rate limit; the same holds while its credentials
// are fetched or its sandbox is built) wins too: the command is refused
// before any decision allows it, and never starts.
func TestRelayTeardownInThePipeline(t *testing.T) {
	e := newTeardownEnv(t)
	marker := filepath.Join(t.TempDir(), "ran")
	id, file := e.sign(t, "/bin/sh", "-c", "touch "+marker)
	held := e.heldRelay(t, "takeToken", id, file)
	if !e.teardown(t, id) {
		t.Error("the teardown of a request in flight says it cancelled nothing")
	}
	e.let(t)
	got := answer(t, held)
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the torn-down request ran")
	}
	if rec := wantTornDown(t, e, id, got); rec.Rule != "sh" || rec.Reason != "cancelled before it started" {
		t.Fatalf("refusal record %+v", rec)
	}
}

// A request torn down in flight but refused before its id is used up (the
// server is paused) is remembered as a teardown that came first: after
// Resume, relayed again, it never runs.
func TestRelayTeardownWhileCheckedAndPaused(t *testing.T) {
	e := newTeardownEnv(t)
	marker := filepath.Join(t.TempDir(), "ran")
	id, file := e.sign(t, "/bin/sh", "-c", "touch "+marker)
	if _, err := e.s.Pause(e.ctx, &coilyv1.PauseRequest{Reason: "test"}); err != nil {
		t.Fatal(err)
	}
	held := e.heldRelay(t, "answerOnce", id, file)
	if !e.teardown(t, id) {
		t.Error("the teardown of a request in flight says it cancelled nothing")
	}
	e.let(t)
	if r, err := descriptor.ParseResponse(answer(t, held)); err != nil || r.Code != string(refusal.PauseActive) {
		t.Fatalf("while paused: %+v %v", r, err)
	}
	if _, err := e.s.Resume(e.ctx, &coilyv1.ResumeRequest{Reason: "test"}); err != nil {
		t.Fatal(err)
	}
	if got := e.relay(t, id, file); string(got) != beforeItStarted(id) {
		t.Fatalf("after resume:\n got %s\nwant %s", got, beforeItStarted(id))
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the torn-down request ran after resume")
	}
}
