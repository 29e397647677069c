package gitproxy

import (
	"context"
	"strings"
	"testing"
	"time"

	coilyv1 "coily.dev/coily/proto/coily/v1"
)

// A caller's pushes in flight are bounded (each holds a quarantine on
// disk while its approval waits): past the bound a push is refused at
// once, rate-limit, and a slot freed serves the next.
func TestPushesInFlightBounded(t *testing.T) {
	e := newEnv(t, "", func(c *Config) { c.MaxPushesPerCaller = 1 })
	old, body := e.forcedPush()
	ch, stop := e.queue.Watch()
	defer stop()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go e.post(ctx, body)
	for a := range ch {
		if a.GetState() == coilyv1.ApprovalState_APPROVAL_STATE_PENDING {
			break
		}
	}
	if status, out := e.post(context.Background(), body); status != 429 || !strings.HasPrefix(out, "rate-limit: ") {
		t.Fatalf("a second push in flight: %d %q", status, out)
	}
	if got := e.lastPush(); got.Code != "rate-limit" {
		t.Fatalf("audit: %+v", got)
	}
	cancel() // the first push ends, its slot freed
	deadline := time.Now().Add(30 * time.Second)
	for e.proxy.pushes.inFlight() > 0 {
		if time.Now().After(deadline) {
			t.Fatal("the first push never freed its slot")
		}
		time.Sleep(10 * time.Millisecond) // polling the audit, with a deadline
	}
	got := e.approveNext(coilyv1.Verdict_VERDICT_APPROVE)
	if status, out := e.post(context.Background(), body); status != 200 || !strings.Contains(out, "ok refs/heads/agent/x") {
		t.Fatalf("the push after: %d %q", status, out)
	}
	<-got
	if e.up.Ref(t, "owner/app", "refs/heads/agent/x") == old {
		t.Fatal("upstream unchanged")
	}
}

func TestPushSlots(t *testing.T) {
	s := &pushSlots{max: 3, per: 2}
	a1, err := s.acquire("a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.acquire("a"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.acquire("a"); err == nil {
		t.Fatal("a third of a's pushes taken")
	}
	if _, err := s.acquire("b"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.acquire("c"); err == nil {
		t.Fatal("a fourth push taken")
	}
	a1()
	if _, err := s.acquire("c"); err != nil {
		t.Fatalf("a freed slot not taken: %v", err)
	}
}
