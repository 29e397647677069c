package fleet_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"coily.dev/coily/internal/poll"
	"coily.dev/coily/internal/testserver"
	"coily.dev/coily/policy"
	coilyv1 "coily.dev/coily/proto/coily/v1"
	"coily.dev/coily/refusal"
	"coily.dev/coily/stops"
	"coily.dev/coily/store"
	"coily.dev/coily/store/etcdstore"
)

// cappedPolicy is the servers' policy with the local operator capped at
// perPrincipal commands at once.
func cappedPolicy(perPrincipal int) string {
	return strings.Replace(testserver.LocalPolicy, "limits: {concurrency: 4}",
		fmt.Sprintf("limits: {concurrency: 8, per_principal: %d}", perPrincipal), 1)
}

// running counts the files the children that run create (run.<pid>).
func running(t *testing.T, dir string) int {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "run.*"))
	if err != nil {
		t.Fatal(err)
	}
	return len(m)
}

// A principal capped at 2 sends 9 Execs at once, 3 to each server: 2 run
// (each child creates a file and waits for a go file) and 7 are refused
// concurrency-busy, whichever server they reached. Counted per host, 6
// would run.
func TestConcurrencyCapAcrossHosts(t *testing.T) {
	ns := serversWith(t, testserver.Options{Policy: cappedPolicy(2)}, etcdstore.Config{})
	dir := t.TempDir()
	script := fmt.Sprintf("touch %[1]s/run.$$; while [ ! -e %[1]s/go ]; do sleep 0.01; done", dir)
	var mu sync.Mutex
	var ran, busy int
	var others []error
	var wg sync.WaitGroup
	for i := range 9 {
		n := ns[i%3]
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			_, err := n.Client.Exec(ctx, &coilyv1.ExecRequest{Argv: []string{"/bin/sh", "-c", script}}, io.Discard, io.Discard)
			mu.Lock()
			defer mu.Unlock()
			switch codeOf(err) {
			case "":
				ran++
			case refusal.ConcurrencyBusy:
				busy++
			default:
				others = append(others, err)
			}
		})
	}
	poll.Until(t, within, "every Exec runs or is refused", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return busy+len(others)+running(t, dir) >= 9
	})
	mu.Lock()
	refused, failed := busy, others
	mu.Unlock()
	if n := running(t, dir); n != 2 || refused != 7 || len(failed) > 0 {
		t.Fatalf("%d running at once, %d refused concurrency-busy, other errors %v; want 2 and 7 (the cap is 2 across the servers)", n, refused, failed)
	}
	if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if ran != 2 {
		t.Fatalf("%d ran to the end, want 2", ran)
	}
	for _, n := range ns {
		poll.Until(t, within, "the slots are free again", func() bool { return n.exec("/bin/true") == nil })
	}
}

// A server cut from the cluster while its command holds the principal's
// one slot stops that command (a fence, answered state-unavailable)
// before the cluster frees its slot: when another server can first take
// the slot, the command is already dead.
func TestFencedHostKillsItsCommands(t *testing.T) {
	ns := serversWith(t, testserver.Options{Policy: cappedPolicy(1)}, etcdstore.Config{SlotTTL: 3 * time.Second, SlotFence: time.Second})
	a, b := ns[0], ns[1]
	s := b.sleep(t)
	if code := codeOf(a.exec("/bin/true")); code != refusal.ConcurrencyBusy {
		t.Fatalf("a second command of the principal: %q, want concurrency-busy", code)
	}
	b.link.Cut()
	poll.Until(t, 30*time.Second, "the cut server's slot is freed", func() bool { return a.exec("/bin/true") == nil })
	if alive(s.pid) {
		t.Fatal("another server took the slot while the cut server's command still ran")
	}
	s.wantStopped(t, refusal.StateUnavailable)
	b.link.Heal()
	poll.Until(t, 30*time.Second, "the healed server runs again", func() bool { return b.exec("/bin/true") == nil })
}

// claim is a claim of principal under the rule sh of a policy capping
// each principal at one command.
func claim(t *testing.T, principal string) *stops.Claim {
	t.Helper()
	pol, err := policy.Parse("p.yaml", []byte("version: 1\nlimits: {concurrency: 8, per_principal: 1}\ncommands:\n  - {name: sh, binary: /bin/sh}\n"))
	if err != nil {
		t.Fatal(err)
	}
	return &stops.Claim{Principal: principal, Rule: pol.Rules()[0], Policy: pol}
}

// waitSlot starts an approved request's wait for a slot on h.
func waitSlot(ctx context.Context, t *testing.T, h *host, cl *stops.Claim) <-chan error {
	t.Helper()
	if err := h.ctl.AdmitWaiter(cl); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- h.ctl.WaitSlot(ctx, cl) }()
	return done
}

// An approved request waiting for a slot on one host gets the slot freed
// on another, and holds it there too (a third host is refused); a lockout
// and a cancelled caller each end such a wait.
func TestWaitSlotAcrossHosts(t *testing.T) {
	hs := hosts(t)
	first := claim(t, "alice")
	if err := hs[0].ctl.TakeSlot(first); err != nil {
		t.Fatal(err)
	}
	waiter := claim(t, "alice")
	waited := waitSlot(context.Background(), t, hs[1], waiter)
	if code := refusal.As(hs[2].ctl.TakeSlot(claim(t, "alice"))).Code; code != refusal.ConcurrencyBusy {
		t.Fatalf("a second slot of the principal on a third host: %q, want concurrency-busy", code)
	}
	hs[0].ctl.Release(nil, first)
	select {
	case err := <-waited:
		if err != nil || !waiter.Held() {
			t.Fatalf("the wait ended with %v, held %v", err, waiter.Held())
		}
	case <-time.After(within):
		t.Fatal("the slot freed on another host never reached the wait")
	}
	if code := refusal.As(hs[2].ctl.TakeSlot(claim(t, "alice"))).Code; code != refusal.ConcurrencyBusy {
		t.Fatalf("the waiter's slot is not held across hosts: %q", code)
	}

	ctx, cancel := context.WithCancel(context.Background())
	gone := claim(t, "alice")
	cancelled := waitSlot(ctx, t, hs[2], gone)
	cancel()
	if err := <-cancelled; err == nil || gone.Held() {
		t.Fatalf("a cancelled wait ended with %v, held %v", err, gone.Held())
	}
	hs[2].ctl.Release(nil, gone)
	locked := waitSlot(context.Background(), t, hs[2], claim(t, "alice"))
	hs[2].ctl.Lockout(store.Stop{Active: true, By: "test", Reason: "end the wait", Since: time.Now()})
	if code := refusal.As(<-locked).Code; code != refusal.LockoutActive {
		t.Fatalf("a wait under a lockout ended with %q", code)
	}
	hs[1].ctl.Release(nil, waiter)
}
