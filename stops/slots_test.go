package stops

import (
	"errors"
	"strings"
	"testing"

	"coily.dev/coily/policy"
	"coily.dev/coily/refusal"
)

func slotExec(t *testing.T, pol *policy.Policy, principal, rule string) *Claim {
	t.Helper()
	for _, r := range pol.Rules() {
		if r.Name == rule {
			return &Claim{Principal: principal, Policy: pol, Rule: r}
		}
	}
	t.Fatalf("no rule %q", rule)
	return nil
}

// A freed slot goes to the oldest queued request its caps allow, before
// any new request; a queued request its own caps still block keeps its
// place.
func TestSlotHandOff(t *testing.T) {
	pol, err := policy.Parse("p.yaml", []byte(`version: 1
limits: {concurrency: 2, per_principal: 2}
commands:
  - {name: a, binary: /bin/echo, concurrency: 1}
  - {name: b, binary: /bin/true}
`))
	if err != nil {
		t.Fatal(err)
	}
	sl := newSlots()
	x1, x2 := slotExec(t, pol, "p1", "a"), slotExec(t, pol, "p2", "b")
	for _, x := range []*Claim{x1, x2} {
		if err := sl.take(x); err != nil {
			t.Fatal(err)
		}
	}
	queue := func(x *Claim) *slotWaiter {
		if err := sl.wait(x); err != nil {
			t.Fatal(err)
		}
		w := &slotWaiter{cl: x, done: make(chan struct{})}
		sl.queue = append(sl.queue, w)
		return w
	}
	w1, w2 := queue(slotExec(t, pol, "p3", "a")), queue(slotExec(t, pol, "p3", "b"))
	granted := func(w *slotWaiter) bool {
		select {
		case <-w.done:
			return w.err == nil && w.cl.held
		default:
			return false
		}
	}

	sl.free(x2)
	sl.handOff()
	if granted(w1) || !granted(w2) || len(sl.queue) != 1 || sl.waiting["p3"] != 1 {
		t.Fatalf("after freeing b: w1 %v w2 %v queue %d waiting %d", granted(w1), granted(w2), len(sl.queue), sl.waiting["p3"])
	}
	// The slot went to the queue, not to a newcomer.
	err = sl.take(slotExec(t, pol, "p4", "b"))
	if r := refusal.As(err); r == nil || r.Code != refusal.ConcurrencyBusy || !strings.Contains(r.Msg, "server cap") {
		t.Fatalf("newcomer: %v", err)
	}
	sl.free(x1)
	sl.handOff()
	if !granted(w1) || len(sl.queue) != 0 || len(sl.waiting) != 0 {
		t.Fatalf("after freeing a: w1 %v queue %d waiting %v", granted(w1), len(sl.queue), sl.waiting)
	}
	if sl.running != 2 || sl.perRule["a"] != 1 || sl.perPrincipal["p3"] != 2 || sl.perBoth["p3\x00b"] != 1 {
		t.Fatalf("counts %+v", sl)
	}
	// Freeing twice frees once.
	if !sl.free(w1.cl) || sl.free(w1.cl) || sl.running != 1 {
		t.Fatalf("double free: running %d", sl.running)
	}

	w3 := queue(slotExec(t, pol, "p5", "a"))
	sl.refuseQueued(refusal.New(refusal.LockoutActive, "locked"))
	if granted(w3) || codeOf(w3.err) != refusal.LockoutActive || len(sl.queue) != 0 {
		t.Fatalf("refused queue: %v", w3.err)
	}
}

// Waiting requests are capped per principal at limits.per_principal.
func TestSlotWaitingCap(t *testing.T) {
	pol, err := policy.Parse("p.yaml", []byte("version: 1\nlimits: {concurrency: 3}\ncommands:\n  - {name: b, binary: /bin/true}\n"))
	if err != nil {
		t.Fatal(err)
	}
	sl := newSlots()
	var xs []*Claim
	for range pol.PerPrincipal() {
		x := slotExec(t, pol, "p", "b")
		if err := sl.wait(x); err != nil {
			t.Fatal(err)
		}
		xs = append(xs, x)
	}
	if err := sl.wait(slotExec(t, pol, "p", "b")); codeOf(err) != refusal.ConcurrencyBusy {
		t.Fatalf("past the cap: %v", err)
	}
	if err := sl.wait(slotExec(t, pol, "q", "b")); err != nil {
		t.Fatalf("another principal: %v", err)
	}
	sl.unwait(xs[0])
	sl.unwait(xs[0])
	if sl.waiting["p"] != pol.PerPrincipal()-1 {
		t.Fatalf("waiting %d after one unwait (twice)", sl.waiting["p"])
	}
}

func codeOf(err error) refusal.Code {
	var r *refusal.Error
	if errors.As(err, &r) {
		return r.Code
	}
	return ""
}
