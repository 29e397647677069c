package relay

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"coily.dev/coily/access"
	"coily.dev/coily/descriptor"
	coilyv1 "coily.dev/coily/proto/coily/v1"
	"coily.dev/coily/refusal"
	"coily.dev/coily/store"
)

// demo is the caller the server names sandbox demo's requests as.
var demo = access.Caller{Principal: "sandbox:demo", Transport: "relay", Peer: "bridge test"}

// fakeExec stands for the server's pipeline: it counts runs and
// refusals; a run waits for release when it is set.
type fakeExec struct {
	mu      sync.Mutex
	runs    int
	refused []refusal.Code
	started chan struct{} // closed as a run starts, when set
	release chan struct{} // a run waits for it, when set
}

func (f *fakeExec) Refuse(_ context.Context, err error) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.refused = append(f.refused, refusal.As(err).Code)
	return err
}

func (f *fakeExec) Admit(*descriptor.Request) error { return nil }

// fakeGit is a git proxy that answers every exchange with an empty
// pkt-line flush, as the caller it was given.
type fakeGit struct {
	mu     sync.Mutex
	runs   int
	caller access.Caller
	body   []byte // the answer's body, "0000" when nil
}

func (f *fakeGit) Exchange(_ context.Context, c access.Caller, _ *descriptor.GitExchange) (*descriptor.GitAnswer, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.runs++
	f.caller = c
	if f.body != nil {
		return &descriptor.GitAnswer{Status: 200, Body: f.body}, nil
	}
	return &descriptor.GitAnswer{Status: 200, Body: []byte("0000")}, nil
}

func (f *fakeExec) Run(ctx context.Context, out Sender) error {
	f.mu.Lock()
	f.runs++
	f.mu.Unlock()
	if f.started != nil {
		close(f.started)
	}
	if f.release != nil {
		select {
		case <-f.release:
		case <-ctx.Done():
			return refusal.Wrap(refusal.Internal, context.Cause(ctx), "cancelled")
		}
	}
	return out.Send(&coilyv1.ExecResponse{Event: &coilyv1.ExecResponse_Exit{Exit: &coilyv1.ExecExit{Duration: durationpb.New(0)}}})
}

type relayEnv struct {
	r   *Relayer
	key []byte
}

func newRelayEnv(t *testing.T) *relayEnv {
	t.Helper()
	db, err := store.Open(filepath.Join(t.TempDir(), "coily.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	key := make([]byte, descriptor.KeySize)
	_, _ = rand.Read(key)
	if _, err := db.IssueKey("demo", key, time.Now()); err != nil {
		t.Fatal(err)
	}
	r := New(Config{Store: db, Logger: slog.New(slog.DiscardHandler), Now: time.Now})
	t.Cleanup(r.Wait)
	return &relayEnv{r: r, key: key}
}

func (e *relayEnv) request(t *testing.T, id string, argv ...string) []byte {
	t.Helper()
	file, err := descriptor.MarshalRequest(&descriptor.Request{ID: id, CreatedAt: time.Now().UTC(),
		Nonce: strings.ReplaceAll(descriptor.NewID(), "-", ""), Sandbox: "demo", Argv: argv}, e.key)
	if err != nil {
		t.Fatal(err)
	}
	return file
}

func outcome(t *testing.T, resp []byte) *descriptor.Response {
	t.Helper()
	r, err := descriptor.ParseResponse(resp)
	if err != nil {
		t.Fatalf("response %q: %v", resp, err)
	}
	return r
}

// A request id runs once: a repeat of the same body is answered from its
// record, another body under it is refused, and held while the first runs
// (its answer is not the id's).
func TestRelayExactlyOnce(t *testing.T) {
	e := newRelayEnv(t)
	id := descriptor.NewID()
	first := e.request(t, id, "/bin/true")
	x := &fakeExec{started: make(chan struct{}), release: make(chan struct{})}
	done := make(chan []byte, 1)
	go func() {
		_, resp, _ := e.r.Relay(context.Background(), x, demo, "demo", id, first)
		done <- resp
	}()
	<-x.started
	other := &fakeExec{}
	_, resp, held := e.r.Relay(context.Background(), other, demo, "demo", id, e.request(t, id, "/bin/false"))
	if r := outcome(t, resp); !held || r.Code != string(refusal.ReplayDetected) {
		t.Fatalf("second body while the first runs: held %v, %+v", held, r)
	}
	close(x.release)
	answer := <-done
	if r := outcome(t, answer); r.Outcome != descriptor.OutcomeExit {
		t.Fatalf("first: %+v", r)
	}
	again := &fakeExec{}
	_, resp, held = e.r.Relay(context.Background(), again, demo, "demo", id, first)
	if held || string(resp) != string(answer) || again.runs != 0 {
		t.Fatalf("repeat: held %v, ran %d, answer %q, want %q", held, again.runs, resp, answer)
	}
	_, resp, held = e.r.Relay(context.Background(), other, demo, "demo", id, e.request(t, id, "/bin/false"))
	if r := outcome(t, resp); held || r.Code != string(refusal.ReplayDetected) || other.runs != 0 {
		t.Fatalf("second body after the first: held %v, %+v", held, r)
	}
	if x.runs != 1 {
		t.Fatalf("ran %d times", x.runs)
	}
}

// A teardown that comes first makes the request never run; one while it
// runs cancels it.
func TestRelayTeardowns(t *testing.T) {
	e := newRelayEnv(t)
	teardown := func(id string) bool {
		td, err := descriptor.MarshalTeardown(&descriptor.Teardown{ID: id, CreatedAt: time.Now().UTC(),
			Nonce: strings.ReplaceAll(descriptor.NewID(), "-", ""), Sandbox: "demo"}, e.key)
		if err != nil {
			t.Fatal(err)
		}
		cancelled, err := e.r.Teardown("demo", id, td)
		if err != nil {
			t.Fatal(err)
		}
		return cancelled
	}
	early := descriptor.NewID()
	if teardown(early) {
		t.Fatal("cancelled a request not in flight")
	}
	x := &fakeExec{}
	_, resp, _ := e.r.Relay(context.Background(), x, demo, "demo", early, e.request(t, early, "/bin/true"))
	if r := outcome(t, resp); x.runs != 0 || r.Code != string(refusal.Internal) || !strings.Contains(r.Message, "teardown") {
		t.Fatalf("after its teardown: ran %d, %+v", x.runs, r)
	}

	id := descriptor.NewID()
	x = &fakeExec{started: make(chan struct{}), release: make(chan struct{})}
	done := make(chan []byte, 1)
	go func() {
		_, resp, _ := e.r.Relay(context.Background(), x, demo, "demo", id, e.request(t, id, "/bin/true"))
		done <- resp
	}()
	<-x.started
	if !teardown(id) {
		t.Fatal("teardown of a running request cancelled nothing")
	}
	if r := outcome(t, <-done); r.Code != string(refusal.Internal) || !strings.Contains(r.Message, "teardown") {
		t.Fatalf("torn down while running: %+v", r)
	}
	if _, err := e.r.Teardown("demo", id, []byte("not: a teardown")); err == nil {
		t.Fatal("a hostile teardown was accepted")
	}
}

// A git exchange is answered once, as a command is: the same file relayed
// again gets the recorded answer (a push is never made twice), and a
// changed body under its id is refused.
func TestRelayGitExchangeOnce(t *testing.T) {
	e := newRelayEnv(t)
	id := descriptor.NewID()
	d := &descriptor.Request{ID: id, CreatedAt: time.Now().UTC(), Nonce: strings.ReplaceAll(descriptor.NewID(), "-", ""), Sandbox: "demo",
		Git: &descriptor.GitExchange{Method: "POST", Path: "/git/h/r/git-receive-pack", Body: []byte("push")}}
	file, err := descriptor.MarshalRequest(d, e.key)
	if err != nil {
		t.Fatal(err)
	}
	x, git := &fakeExec{}, &fakeGit{}
	_, resp, _ := e.r.Relay(context.Background(), x, demo, "demo", id, file)
	if r := outcome(t, resp); r.Code != string(refusal.Internal) || !strings.Contains(r.Message, "does not serve the git proxy") {
		t.Fatalf("without a proxy: %+v", r)
	}
	e.r.git.Store(&gitServed{git})
	_, first, _ := e.r.Relay(context.Background(), x, demo, "demo", id, file) // the id was not used up
	if r := outcome(t, first); r.Outcome != descriptor.OutcomeHTTP || r.Git.Status != 200 || string(r.Git.Body) != "0000" {
		t.Fatalf("first: %+v", r)
	}
	if git.caller.Principal != demo.Principal || git.caller.RelayID != id {
		t.Fatalf("the exchange ran as %+v", git.caller)
	}
	_, again, _ := e.r.Relay(context.Background(), x, demo, "demo", id, file)
	if string(again) != string(first) || git.runs != 1 || x.runs != 0 {
		t.Fatalf("repeat: %d runs, %q", git.runs, again)
	}
	d.Git.Body = []byte("other")
	other, err := descriptor.MarshalRequest(d, e.key)
	if err != nil {
		t.Fatal(err)
	}
	_, resp, _ = e.r.Relay(context.Background(), x, demo, "demo", id, other)
	if r := outcome(t, resp); r.Code != string(refusal.ReplayDetected) || git.runs != 1 {
		t.Fatalf("other body: %d runs, %+v", git.runs, r)
	}
}

// A git answer larger than a stream's worth is sent whole but kept only
// as its status, length and digest: a repeat of its id is refused
// replay-detected, naming them, and never runs it again; one at the
// bound is kept whole.
func TestRelayGitLargeAnswerNotKept(t *testing.T) {
	e := newRelayEnv(t)
	git := &fakeGit{}
	e.r.git.Store(&gitServed{git})
	for _, n := range []int{maxKeptGitBody, maxKeptGitBody + 1} {
		git.body = make([]byte, n)
		id := descriptor.NewID()
		file, err := descriptor.MarshalRequest(&descriptor.Request{ID: id, CreatedAt: time.Now().UTC(),
			Nonce: strings.ReplaceAll(descriptor.NewID(), "-", ""), Sandbox: "demo",
			Git: &descriptor.GitExchange{Method: "POST", Path: "/git/h/r/git-upload-pack", Body: []byte("0000")}}, e.key)
		if err != nil {
			t.Fatal(err)
		}
		runs := git.runs
		_, first, _ := e.r.Relay(context.Background(), &fakeExec{}, demo, "demo", id, file)
		if r := outcome(t, first); r.Outcome != descriptor.OutcomeHTTP || len(r.Git.Body) != n {
			t.Fatalf("%d bytes, first: %s %s", n, r.Outcome, r.Code)
		}
		rec, err := e.r.cfg.Store.Relay(id)
		if err != nil {
			t.Fatal(err)
		}
		_, again, _ := e.r.Relay(context.Background(), &fakeExec{}, demo, "demo", id, file)
		r := outcome(t, again)
		switch {
		case git.runs != runs+1:
			t.Fatalf("%d bytes: run %d times", n, git.runs-runs)
		case n == maxKeptGitBody && string(again) != string(first):
			t.Fatalf("an answer at the bound was not kept whole: %s %s", r.Outcome, r.Code)
		case n > maxKeptGitBody && (len(rec.Response) > 1024 || r.Code != string(refusal.ReplayDetected) ||
			!strings.Contains(r.Message, "http status 200, 1048577 bytes, sha256 ")):
			t.Fatalf("a large answer kept as %d bytes, repeated as %s %q", len(rec.Response), r.Code, r.Message)
		}
	}
}

// downStore is a Store whose keys or records are out of reach (as shared
// state without a quorum): those calls fail with store.ErrUnavailable.
type downStore struct {
	Store
	keys, records bool
}

var errDown = fmt.Errorf("no quorum: %w", store.ErrUnavailable)

func (d downStore) Key(sandbox string) (store.Key, error) {
	if d.keys {
		return store.Key{}, errDown
	}
	return d.Store.Key(sandbox)
}

func (d downStore) Relay(id string) (store.Relay, error) {
	if d.records {
		return store.Relay{}, errDown
	}
	return d.Store.Relay(id)
}

func (d downStore) AcceptRelay(r store.Relay, nonce string, exp time.Time) (store.Relay, bool, error) {
	if d.records {
		return store.Relay{}, false, errDown
	}
	return d.Store.AcceptRelay(r, nonce, exp)
}

// A relayed request whose key or record cannot be reached is answered
// state-unavailable and never run; its id is not used up.
func TestRelayStateUnavailable(t *testing.T) {
	e := newRelayEnv(t)
	db := e.r.cfg.Store
	for name, down := range map[string]downStore{"keys": {Store: db, keys: true}, "records": {Store: db, records: true}} {
		t.Run(name, func(t *testing.T) {
			e.r.cfg.Store = down
			x := &fakeExec{}
			id := descriptor.NewID()
			_, resp, _ := e.r.Relay(context.Background(), x, demo, "demo", id, e.request(t, id, "/bin/true"))
			if r := outcome(t, resp); r.Code != string(refusal.StateUnavailable) || x.runs != 0 {
				t.Fatalf("answer %+v, %d runs; want state-unavailable and none", r, x.runs)
			}
			e.r.cfg.Store = db
			if _, err := db.Relay(id); !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("the id was recorded: %v", err)
			}
		})
	}
}
