package stops

import (
	"context"

	"coily.dev/coily/policy"
	"coily.dev/coily/refusal"
	"coily.dev/coily/store"
)

// Claim is one request's hold on the concurrency slots: who asks, under
// which rule and which policy's caps. The request fills in Rule and Policy
// before it takes or waits for a slot; the controls keep the rest.
type Claim struct {
	Principal string
	Rule      *policy.Rule
	Policy    *policy.Policy
	held      bool // holds a concurrency slot
	// release frees the slot held in the ledger (Config.Ledger), if any.
	release func() error
	waiting bool // counted among its principal's requests waiting for an approval or a slot
}

// Held reports whether the claim holds a slot.
func (cl *Claim) Held() bool { return cl.held }

// slots counts the concurrency slots in use and the requests waiting for
// an approval or a slot. Counts live in memory: the commands they count do
// not survive a restart either. Guarded by Controls.mu. With a ledger
// (Config.Ledger) the slots in use are counted there, across hosts, and
// only the requests waiting are counted here (ledger.go).
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
	cl   *Claim
	done chan struct{} // closed once granted (cl.held) or refused (err)
	err  error
}

func newSlots() slots {
	return slots{perRule: map[string]int{}, perPrincipal: map[string]int{}, perBoth: map[string]int{}, waiting: map[string]int{}}
}

func bothKey(cl *Claim) string { return cl.Principal + "\x00" + cl.Rule.Name }

// take gives cl a slot, or says which cap refuses it (fits).
func (sl *slots) take(cl *Claim) error {
	if err := fits(cl, sl.tally(cl)); err != nil {
		return err
	}
	sl.running++
	sl.perRule[cl.Rule.Name]++
	sl.perPrincipal[cl.Principal]++
	sl.perBoth[bothKey(cl)]++
	cl.held = true
	return nil
}

// tally counts the slots in use that cl's caps look at.
func (sl *slots) tally(cl *Claim) store.Tally {
	return store.Tally{Both: sl.perBoth[bothKey(cl)], Principal: sl.perPrincipal[cl.Principal], Rule: sl.perRule[cl.Rule.Name], All: sl.running}
}

// fits says whether one more slot for cl is within its caps, given the
// slots in use t, or which cap refuses it: the rule's cap for one
// principal, the principal's, the rule's, then the server's. Each request
// is held to the policy it was admitted under.
func fits(cl *Claim, t store.Tally) error {
	p, r, pol := cl.Principal, cl.Rule, cl.Policy
	switch {
	case r.PerPrincipal > 0 && t.Both >= r.PerPrincipal:
		return refusal.New(refusal.ConcurrencyBusy, "principal cap of rule %q: %s already runs %d of its commands (its per_principal); retry when one finishes", r.Name, p, r.PerPrincipal)
	case t.Principal >= pol.PerPrincipal():
		return refusal.New(refusal.ConcurrencyBusy, "principal cap: %s already runs %d command(s) (limits.per_principal); retry when one finishes", p, pol.PerPrincipal())
	case r.Concurrency > 0 && t.Rule >= r.Concurrency:
		return refusal.New(refusal.ConcurrencyBusy, "rule cap: rule %q already runs %d command(s) (its concurrency); retry when one finishes", r.Name, r.Concurrency)
	case t.All >= pol.Concurrency():
		return refusal.New(refusal.ConcurrencyBusy, "server cap: %d of %d command slots in use (limits.concurrency); retry when one finishes", t.All, pol.Concurrency())
	}
	return nil
}

// free gives back cl's slot, if it holds one, and reports whether it did.
func (sl *slots) free(cl *Claim) bool {
	if !cl.held {
		return false
	}
	sl.running--
	decr(sl.perRule, cl.Rule.Name)
	decr(sl.perPrincipal, cl.Principal)
	decr(sl.perBoth, bothKey(cl))
	cl.held = false
	return true
}

func decr(m map[string]int, k string) {
	if m[k]--; m[k] <= 0 {
		delete(m, k)
	}
}

// wait counts cl among its principal's waiting requests, unless the
// principal already has its cap of them.
func (sl *slots) wait(cl *Claim) error {
	p, limit := cl.Principal, cl.Policy.PerPrincipal()
	if sl.waiting[p] >= limit {
		return refusal.New(refusal.ConcurrencyBusy, "principal cap: %s already has %d request(s) waiting for an approval or a slot (limits.per_principal); retry when one is decided", p, limit)
	}
	sl.waiting[p]++
	cl.waiting = true
	return nil
}

// unwait stops counting cl as waiting.
func (sl *slots) unwait(cl *Claim) {
	if cl.waiting {
		decr(sl.waiting, cl.Principal)
		cl.waiting = false
	}
}

// handOff gives free slots to the queued requests, oldest first.
func (sl *slots) handOff() {
	kept := sl.queue[:0]
	for _, w := range sl.queue {
		if sl.take(w.cl) == nil {
			sl.unwait(w.cl)
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

// TakeSlot takes a concurrency slot for a request that needs no
// approval; refused with concurrency-busy naming the cap reached.
func (c *Controls) TakeSlot(cl *Claim) error {
	if c.ledger != nil {
		return c.holdShared(cl)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.slots.take(cl)
}

// AdmitWaiter counts a request that needs an approval among its
// principal's waiting ones: it takes its slot only once approved.
func (c *Controls) AdmitWaiter(cl *Claim) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.slots.wait(cl)
}

// WaitSlot takes a slot for an approved request, waiting for one if none
// is free: a human approved it, so it is not refused for want of a slot.
// It waits ahead of new requests until a slot its caps allow is freed,
// the caller goes away, or a lockout or shutdown ends the wait.
func (c *Controls) WaitSlot(ctx context.Context, cl *Claim) error {
	if c.ledger != nil {
		return c.waitShared(ctx, cl)
	}
	c.mu.Lock()
	if done, err := c.settledLocked(cl); done {
		c.mu.Unlock()
		return err
	}
	if c.slots.take(cl) == nil {
		c.slots.unwait(cl)
		c.mu.Unlock()
		return nil
	}
	w := &slotWaiter{cl: cl, done: make(chan struct{})}
	c.slots.queue = append(c.slots.queue, w)
	c.mu.Unlock()

	select {
	case <-w.done:
	case <-ctx.Done():
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	select {
	case <-w.done:
		return w.err // granted (cl.held) or refused
	default:
		c.slots.queue = removeWaiter(c.slots.queue, w)
		return refusal.Wrap(refusal.Internal, ctx.Err(), "request cancelled while waiting for a slot")
	}
}

// settledLocked reports whether cl needs no wait for a slot: it holds one
// (nil), or a lockout, pause or shutdown refuses it (that refusal).
func (c *Controls) settledLocked(cl *Claim) (bool, error) {
	if cl.held {
		return true, nil
	}
	if err := c.haltedLocked(); err != nil {
		return true, err
	}
	return false, nil
}

func removeWaiter(q []*slotWaiter, w *slotWaiter) []*slotWaiter {
	for i, o := range q {
		if o == w {
			return append(q[:i], q[i+1:]...)
		}
	}
	return q
}
