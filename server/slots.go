package server

import (
	"context"

	"coily.dev/coily/refusal"
)

// slots counts the concurrency slots in use and the requests waiting for
// an approval or a slot. Counts live in memory: the commands they count do
// not survive a restart either. Guarded by Server.mu.
type slots struct {
	running      int            // slots in use, server-wide
	perRule      map[string]int // by rule
	perPrincipal map[string]int // by principal
	perBoth      map[string]int // by principal and rule (bothKey)
	// waiting counts, by principal, the requests waiting for an approval
	// or, approved, for a slot: they hold no slot, but are capped too.
	waiting map[string]int
	// queue holds the approved requests waiting for a slot, oldest first.
	// A freed slot goes to the first one whose caps allow it, before any
	// new request can take it.
	queue []*slotWaiter
}

// slotWaiter is an approved request waiting for a slot.
type slotWaiter struct {
	x    *execution
	done chan struct{} // closed once granted (x.slot) or refused (err)
	err  error
}

func newSlots() slots {
	return slots{perRule: map[string]int{}, perPrincipal: map[string]int{}, perBoth: map[string]int{}, waiting: map[string]int{}}
}

func bothKey(x *execution) string { return x.caller.Principal + "\x00" + x.rule.Name }

// take gives x a slot, or says which cap refuses it: the rule's cap for
// one principal, the principal's, the rule's, then the server's. Each
// execution is held to the policy it was admitted under.
func (sl *slots) take(x *execution) error {
	p, r, pol := x.caller.Principal, x.rule, x.policy
	switch {
	case r.PerPrincipal > 0 && sl.perBoth[bothKey(x)] >= r.PerPrincipal:
		return refusal.New(refusal.ConcurrencyBusy, "principal cap of rule %q: %s already runs %d of its commands (its per_principal); retry when one finishes", r.Name, p, r.PerPrincipal)
	case sl.perPrincipal[p] >= pol.PerPrincipal():
		return refusal.New(refusal.ConcurrencyBusy, "principal cap: %s already runs %d command(s) (limits.per_principal); retry when one finishes", p, pol.PerPrincipal())
	case r.Concurrency > 0 && sl.perRule[r.Name] >= r.Concurrency:
		return refusal.New(refusal.ConcurrencyBusy, "rule cap: rule %q already runs %d command(s) (its concurrency); retry when one finishes", r.Name, r.Concurrency)
	case sl.running >= pol.Concurrency():
		return refusal.New(refusal.ConcurrencyBusy, "server cap: %d of %d command slots in use (limits.concurrency); retry when one finishes", sl.running, pol.Concurrency())
	}
	sl.running++
	sl.perRule[r.Name]++
	sl.perPrincipal[p]++
	sl.perBoth[bothKey(x)]++
	x.slot = true
	return nil
}

// free gives back x's slot, if it holds one, and reports whether it did.
func (sl *slots) free(x *execution) bool {
	if !x.slot {
		return false
	}
	sl.running--
	decr(sl.perRule, x.rule.Name)
	decr(sl.perPrincipal, x.caller.Principal)
	decr(sl.perBoth, bothKey(x))
	x.slot = false
	return true
}

func decr(m map[string]int, k string) {
	if m[k]--; m[k] <= 0 {
		delete(m, k)
	}
}

// wait counts x among its principal's waiting requests, unless the
// principal already has its cap of them.
func (sl *slots) wait(x *execution) error {
	p, limit := x.caller.Principal, x.policy.PerPrincipal()
	if sl.waiting[p] >= limit {
		return refusal.New(refusal.ConcurrencyBusy, "principal cap: %s already has %d request(s) waiting for an approval or a slot (limits.per_principal); retry when one is decided", p, limit)
	}
	sl.waiting[p]++
	x.waiting = true
	return nil
}

// unwait stops counting x as waiting.
func (sl *slots) unwait(x *execution) {
	if x.waiting {
		decr(sl.waiting, x.caller.Principal)
		x.waiting = false
	}
}

// handOff gives free slots to the queued requests, oldest first.
func (sl *slots) handOff() {
	kept := sl.queue[:0]
	for _, w := range sl.queue {
		if sl.take(w.x) == nil {
			sl.unwait(w.x)
			close(w.done)
			continue
		}
		kept = append(kept, w)
	}
	clear(sl.queue[len(kept):])
	sl.queue = kept
}

// refuseQueued ends every queued request's wait with err.
func (sl *slots) refuseQueued(err error) {
	for _, w := range sl.queue {
		w.err = err
		close(w.done)
	}
	sl.queue = nil
}

// acquireSlot takes a concurrency slot for a request that needs no
// approval; refused with concurrency-busy naming the cap reached.
func (s *Server) acquireSlot(x *execution) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.slots.take(x)
}

// admitWaiter counts a request that needs an approval among its
// principal's waiting ones: it takes its slot only once approved.
func (s *Server) admitWaiter(x *execution) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.slots.wait(x)
}

// waitSlot takes a slot for an approved request, waiting for one if none
// is free: a human approved it, so it is not refused for want of a slot.
// It waits ahead of new requests until a slot its caps allow is freed,
// the caller goes away, or a lockout or shutdown ends the wait.
func (s *Server) waitSlot(ctx context.Context, x *execution) error {
	s.mu.Lock()
	if x.slot {
		s.mu.Unlock()
		return nil
	}
	if err := s.haltedLocked(); err != nil {
		s.mu.Unlock()
		return err
	}
	if s.slots.take(x) == nil {
		s.slots.unwait(x)
		s.mu.Unlock()
		return nil
	}
	w := &slotWaiter{x: x, done: make(chan struct{})}
	s.slots.queue = append(s.slots.queue, w)
	s.mu.Unlock()

	select {
	case <-w.done:
	case <-ctx.Done():
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-w.done:
		return w.err // granted (x.slot) or refused
	default:
		s.slots.queue = removeWaiter(s.slots.queue, w)
		return refusal.Wrap(refusal.Internal, ctx.Err(), "request cancelled while waiting for a slot")
	}
}

func removeWaiter(q []*slotWaiter, w *slotWaiter) []*slotWaiter {
	for i, o := range q {
		if o == w {
			return append(q[:i], q[i+1:]...)
		}
	}
	return q
}

// haltedLocked is the refusal that ends every wait: shutdown or lockout
// (a pause lets what was admitted before it run). Must hold s.mu.
func (s *Server) haltedLocked() error {
	if s.closing {
		return refusal.New(refusal.Internal, "server is shutting down")
	}
	if l := s.stops.Lockout; l.Active {
		return lockoutRefusal(l)
	}
	return nil
}
