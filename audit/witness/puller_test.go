package witness

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"coily.dev/coily/audit"
	"coily.dev/coily/internal/poll"
	"coily.dev/coily/internal/testlog"
)

// honest answers as the server's AnswerPull does: l's checkpoint of n
// records for a witness holding old.
func honest(t testing.TB, l *memLog, n *int64) Source {
	return func(_ context.Context, old int64) ([]byte, error) {
		return addBody(l.sign(t, *n), old, l.prove)
	}
}

// A witness that pulls keeps a checkpoint that grows with the log, on
// disk: a witness opened again on its directory holds it.
func TestPullKeepsGrowingCheckpoint(t *testing.T) {
	dir := t.TempDir()
	l := newMemLog(t, "coily/a")
	s, _ := newWitness(t, dir, l)
	var n int64
	src := honest(t, l, &n)
	for _, n = range []int64{0, 1, 3, 7, 7, 20, 1000} {
		tree, err := s.PullFrom(context.Background(), "coily/a", src)
		if err != nil {
			t.Fatalf("size %d: %v", n, err)
		}
		if tree != l.tree(t, n) {
			t.Fatalf("size %d: holds %+v, want %+v", n, tree, l.tree(t, n))
		}
	}
	_ = s.Close()
	s2, _ := newWitness(t, dir, l)
	if got := s2.Held("coily/a"); got != l.tree(t, 1000) {
		t.Fatalf("reopened: holds %+v, want 1000 records", got)
	}
}

// What a host that lost or changed records (or lies) answers is refused,
// named, and the witness keeps the tree it held, on disk too.
func TestPullRefusesWhatDoesNotExtendTheHeldTree(t *testing.T) {
	l := newMemLog(t, "coily/a")
	forked := &memLog{skey: l.skey, vkey: l.vkey, tag: " forked"} // the same key, other records
	other := newMemLog(t, "coily/a")                              // the same origin, another key
	const held = 20
	cases := []struct {
		name   string
		body   func(t *testing.T, old int64) []byte
		why    string
		signed bool // by the log's key: the owner's alarm
	}{
		{"a smaller tree (the tail cut)", func(t *testing.T, old int64) []byte {
			return must(t)(addBody(l.sign(t, 15), old, l.prove))
		}, "records 16 to 20 were removed", true},
		{"an empty tree", func(t *testing.T, old int64) []byte {
			return must(t)(addBody(l.sign(t, 0), old, l.prove))
		}, "records 1 to 20 were removed", true},
		{"a smaller tree, old lied", func(t *testing.T, old int64) []byte {
			return must(t)(addBody(l.sign(t, 15), 15, l.prove))
		}, "holds 20 records", true},
		{"another root at the size held (a fork)", func(t *testing.T, old int64) []byte {
			return must(t)(addBody(forked.sign(t, held), old, forked.prove))
		}, "a fork", true},
		{"a larger tree that rewrote the held records", func(t *testing.T, old int64) []byte {
			return must(t)(addBody(forked.sign(t, 40), old, forked.prove))
		}, "not consistent", true},
		{"a larger tree, no proof", func(t *testing.T, old int64) []byte {
			return AddRequest{Old: old, Checkpoint: l.sign(t, 40)}.Format()
		}, "not consistent", true},
		{"a larger tree, old lied to skip the proof", func(t *testing.T, old int64) []byte {
			return AddRequest{Old: 0, Checkpoint: l.sign(t, 40)}.Format()
		}, "holds 20 records", true},
		{"signed by another key", func(t *testing.T, old int64) []byte {
			return must(t)(addBody(other.sign(t, 40), old, other.prove))
		}, "not signed by", false},
		{"not a request", func(t *testing.T, old int64) []byte { return []byte("hello\n") }, "malformed", false},
		{"an unsigned checkpoint", func(t *testing.T, old int64) []byte {
			return AddRequest{Old: old, Checkpoint: audit.Checkpoint{Origin: "coily/a", Tree: l.tree(t, 40)}.Format()}.Format()
		}, "checkpoint", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			s, _ := newWitness(t, dir, l)
			n := int64(held)
			if _, err := s.PullFrom(context.Background(), "coily/a", honest(t, l, &n)); err != nil {
				t.Fatal(err)
			}
			_, err := s.PullFrom(context.Background(), "coily/a", func(_ context.Context, old int64) ([]byte, error) {
				if old != held {
					t.Errorf("asked from %d, want %d", old, held)
				}
				return tc.body(t, old), nil
			})
			var refused *RefusedError
			if !errors.As(err, &refused) || !strings.Contains(err.Error(), tc.why) || refused.Held != l.tree(t, held) {
				t.Fatalf("got %v, want a refusal naming %q, holding %d", err, tc.why, held)
			}
			if refused.Signed != tc.signed {
				t.Fatalf("signed by the log's key: %v, want %v", refused.Signed, tc.signed)
			}
			_ = s.Close()
			s2, _ := newWitness(t, dir, l)
			if got := s2.Held("coily/a"); got != l.tree(t, held) {
				t.Fatalf("on disk after the refusal: %+v", got)
			}
		})
	}
}

func must(t *testing.T) func([]byte, error) []byte {
	return func(b []byte, err error) []byte {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
}

// A host that does not answer is an outage, not a refusal.
func TestPullUnreachableIsNotARefusal(t *testing.T) {
	l := newMemLog(t, "coily/a")
	s, _ := newWitness(t, t.TempDir(), l)
	_, err := s.PullFrom(context.Background(), "coily/a", func(context.Context, int64) ([]byte, error) {
		return nil, errors.New("connection refused")
	})
	var unreachable *UnreachableError
	var refused *RefusedError
	if !errors.As(err, &unreachable) || errors.As(err, &refused) {
		t.Fatalf("got %v", err)
	}
}

// RunPuller keeps what the host answers until it answers a cut log: then
// it logs an ALARM and tells Refused, every pull, and keeps what it held.
func TestRunPullerAlarmsOnACutLog(t *testing.T) {
	l := newMemLog(t, "coily/a")
	s, _ := newWitness(t, t.TempDir(), l)
	var mu sync.Mutex
	n := int64(10)
	src := func(ctx context.Context, old int64) ([]byte, error) {
		mu.Lock()
		defer mu.Unlock()
		return addBody(l.sign(t, n), old, l.prove)
	}
	logs := new(testlog.Buffer)
	refusals := make(chan *RefusedError, 100)
	pulled := make(chan audit.Tree, 100)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		RunPuller(ctx, PullerConfig{Witness: s, Origin: "coily/a", Source: src, Every: time.Millisecond,
			Logger: slog.New(slog.NewTextHandler(logs, nil)),
			Refused: func(r *RefusedError) {
				select {
				case refusals <- r:
				default:
				}
			},
			Pulled: func(t audit.Tree) {
				select {
				case pulled <- t:
				default:
				}
			}})
	}()
	defer func() { cancel(); <-done }()
	if tree := <-pulled; tree.N != 10 {
		t.Fatalf("first pull kept %d records", tree.N)
	}
	mu.Lock()
	n = 30
	mu.Unlock()
	poll.Until(t, 10*time.Second, "the puller keeps 30 records", func() bool { return s.Held("coily/a").N == 30 })
	mu.Lock()
	n = 25
	mu.Unlock()
	select {
	case r := <-refusals:
		if r.Held.N != 30 || !strings.Contains(r.Why, "records 26 to 30 were removed") {
			t.Fatalf("refusal: %v", r)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("no refusal:\n%s", logs)
	}
	poll.Until(t, 10*time.Second, "the ALARM is logged", func() bool {
		return bytes.Contains([]byte(logs.String()), []byte("ALARM")) && strings.Contains(logs.String(), "records 26 to 30 were removed")
	})
	if got := s.Held("coily/a"); got.N != 30 {
		t.Fatalf("holds %d after the refusal", got.N)
	}
}

// A server that answers another log's checkpoint (in a fleet each host
// keeps its own log) is not a refusal: the witness keeps what it held and
// the puller raises no alarm.
func TestPullAnotherLogIsNotARefusal(t *testing.T) {
	l := newMemLog(t, "coily/a")
	stranger := newMemLog(t, "coily/b")
	s, _ := newWitness(t, t.TempDir(), l)
	n := int64(20)
	if _, err := s.PullFrom(context.Background(), "coily/a", honest(t, l, &n)); err != nil {
		t.Fatal(err)
	}
	m := int64(40)
	_, err := s.PullFrom(context.Background(), "coily/a", honest(t, stranger, &m))
	var unreachable *UnreachableError
	var refused *RefusedError
	if !errors.As(err, &unreachable) || errors.As(err, &refused) || !strings.Contains(err.Error(), `another log, "coily/b"`) {
		t.Fatalf("got %v, want an outage naming the other log", err)
	}
	if got := s.Held("coily/a"); got != l.tree(t, 20) {
		t.Fatalf("holds %+v", got)
	}
}

// runPuller runs RunPuller with cfg's Witness, Origin and Logger set,
// until the test ends; done closes when it returns.
func runPuller(t *testing.T, s *Server, cfg PullerConfig) (logs *testlog.Buffer, done chan struct{}) {
	t.Helper()
	logs = new(testlog.Buffer)
	cfg.Witness, cfg.Origin, cfg.Logger = s, "coily/a", slog.New(slog.NewTextHandler(logs, nil))
	if cfg.Every == 0 {
		cfg.Every = time.Millisecond
	}
	ctx, cancel := context.WithCancel(context.Background())
	done = make(chan struct{})
	go func() {
		defer close(done)
		RunPuller(ctx, cfg)
	}()
	t.Cleanup(func() { cancel(); <-done })
	return logs, done
}

// An answer that is not signed by the log's key is refused (the witness
// keeps what it held) and logged, never as the ALARM of lost records: it
// is not the log's word.
func TestRunPullerNoAlarmForAnUnsignedAnswer(t *testing.T) {
	l := newMemLog(t, "coily/a")
	other := newMemLog(t, "coily/a") // the same origin, another key
	s, _ := newWitness(t, t.TempDir(), l)
	n := int64(20)
	if _, err := s.PullFrom(context.Background(), "coily/a", honest(t, l, &n)); err != nil {
		t.Fatal(err)
	}
	var refusals atomic.Int32
	m := int64(40)
	logs, _ := runPuller(t, s, PullerConfig{Source: honest(t, other, &m), Refused: func(*RefusedError) { refusals.Add(1) }})
	poll.Until(t, 10*time.Second, "two refusals logged", func() bool {
		return strings.Count(logs.String(), "not a checkpoint signed by the log's key") >= 2
	})
	if strings.Contains(logs.String(), "ALARM") || refusals.Load() != 0 {
		t.Fatalf("an alarm (%d refusals told):\n%s", refusals.Load(), logs)
	}
	if got := s.Held("coily/a"); got != l.tree(t, 20) {
		t.Fatalf("holds %+v", got)
	}
}

// A host that refuses the witness for good (a permission it lacks) stops
// the puller after one pull, logged once with what it needs: not a
// refusal (an audit record on the host) every pull.
func TestRunPullerStopsWhenDenied(t *testing.T) {
	l := newMemLog(t, "coily/a")
	s, _ := newWitness(t, t.TempDir(), l)
	var pulls atomic.Int32
	logs, done := runPuller(t, s, PullerConfig{Source: func(context.Context, int64) ([]byte, error) {
		pulls.Add(1)
		return nil, &DeniedError{Err: errors.New("permission-denied: no"), Hint: "a role with relay"}
	}})
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("the puller still runs after %d pulls:\n%s", pulls.Load(), logs)
	}
	if pulls.Load() != 1 || strings.Count(logs.String(), "stops pulling") != 1 || !strings.Contains(logs.String(), "a role with relay") {
		t.Fatalf("%d pulls:\n%s", pulls.Load(), logs)
	}
}

// A host that keeps answering the checkpoint the witness holds while it
// answers requests that write records (a frozen log: every later record
// hidden) raises an ALARM once answered requests went unseen for Stale;
// a tree that grows, or no request answered, raises none.
func TestRunPullerAlarmsOnAFrozenLog(t *testing.T) {
	l := newMemLog(t, "coily/a")
	s, _ := newWitness(t, t.TempDir(), l)
	var mu sync.Mutex
	n, answered, now := int64(10), int64(0), time.Unix(1e9, 0)
	set := func(f func()) { mu.Lock(); defer mu.Unlock(); f() }
	var pulls atomic.Int64
	frozen := make(chan int64, 1)
	logs, _ := runPuller(t, s, PullerConfig{Stale: time.Hour,
		Source: func(ctx context.Context, old int64) ([]byte, error) {
			mu.Lock()
			defer mu.Unlock()
			return addBody(l.sign(t, n), old, l.prove)
		},
		Answered: func() int64 { mu.Lock(); defer mu.Unlock(); return answered },
		now:      func() time.Time { mu.Lock(); defer mu.Unlock(); return now },
		Pulled:   func(audit.Tree) { pulls.Add(1) },
		Frozen: func(a int64) {
			select {
			case frozen <- a:
			default:
			}
		}})
	// twoPulls waits until a whole pull (and its freeze check, after
	// Pulled) ran after a change.
	twoPulls := func() {
		t.Helper()
		c := pulls.Load()
		poll.Until(t, 10*time.Second, "two pulls", func() bool { return pulls.Load() >= c+2 })
	}
	noAlarm := func(what string) {
		t.Helper()
		twoPulls()
		select {
		case a := <-frozen:
			t.Fatalf("%s: a freeze alarm (%d answered):\n%s", what, a, logs)
		default:
		}
	}
	twoPulls()
	set(func() { now = now.Add(3 * time.Hour) })
	noAlarm("nothing answered")
	set(func() { answered = 3 })
	noAlarm("answered, within Stale")
	set(func() { now = now.Add(59 * time.Minute) })
	noAlarm("answered, within Stale")
	set(func() { now = now.Add(time.Minute) })
	select {
	case a := <-frozen:
		if a != 3 {
			t.Fatalf("the alarm counts %d answered, want 3", a)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("no freeze alarm:\n%s", logs)
	}
	poll.Until(t, 10*time.Second, "the ALARM is logged", func() bool {
		return strings.Contains(logs.String(), "ALARM: the trust point's log did not grow though it answered")
	})
	// The log grows: the count starts again.
	set(func() { n, answered = 13, 5 })
	poll.Until(t, 10*time.Second, "the witness keeps 13", func() bool { return s.Held("coily/a").N == 13 })
	twoPulls()
	select {
	case <-frozen:
	default:
	}
	set(func() { now = now.Add(3 * time.Hour) })
	noAlarm("grown, nothing answered since")
}

// A host that gave a checkpoint and then refuses the pull (permission
// denied: what a host hiding records would answer to switch its witness
// off) raises an ALARM at each pull, and the puller goes on: the freeze
// check still sees the requests it answers.
func TestRunPullerDeniedAfterPullsStillAlarmsOnFreeze(t *testing.T) {
	l := newMemLog(t, "coily/a")
	s, _ := newWitness(t, t.TempDir(), l)
	var mu sync.Mutex
	deny, answered, now := false, int64(0), time.Unix(1e9, 0)
	set := func(f func()) { mu.Lock(); defer mu.Unlock(); f() }
	var pulls atomic.Int64
	frozen := make(chan int64, 1)
	logs, done := runPuller(t, s, PullerConfig{Stale: time.Hour,
		Source: func(ctx context.Context, old int64) ([]byte, error) {
			pulls.Add(1)
			mu.Lock()
			defer mu.Unlock()
			if deny {
				return nil, &DeniedError{Err: errors.New("permission-denied: no"), Hint: "a role with relay"}
			}
			return addBody(l.sign(t, 10), old, l.prove)
		},
		Answered: func() int64 { mu.Lock(); defer mu.Unlock(); return answered },
		now:      func() time.Time { mu.Lock(); defer mu.Unlock(); return now },
		Frozen: func(a int64) {
			select {
			case frozen <- a:
			default:
			}
		}})
	poll.Until(t, 10*time.Second, "the witness keeps 10", func() bool { return s.Held("coily/a").N == 10 })
	set(func() { deny, answered = true, 4 })
	c := pulls.Load()
	poll.Until(t, 10*time.Second, "two denied pulls", func() bool { return pulls.Load() >= c+2 })
	set(func() { now = now.Add(2 * time.Hour) })
	select {
	case a := <-frozen:
		if a != 4 {
			t.Fatalf("the alarm counts %d answered, want 4", a)
		}
	case <-done:
		t.Fatalf("the puller stopped on a denial after a checkpoint:\n%s", logs)
	case <-time.After(10 * time.Second):
		t.Fatalf("no freeze alarm:\n%s", logs)
	}
	if !strings.Contains(logs.String(), "ALARM: the trust point now refuses the witness") || strings.Contains(logs.String(), "stops pulling") {
		t.Fatalf("logs:\n%s", logs)
	}
}
