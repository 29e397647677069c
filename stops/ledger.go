package stops

import (
	"context"
	"errors"
	"syscall"
	"time"

	"coily.dev/coily/refusal"
	"coily.dev/coily/store"
)

// Ledger keeps the concurrency slots held on every host that shares it
// (*etcdstore.Store is one), so that a cap holds across hosts. Without
// one (bbolt, one host) the slots are counted in memory.
type Ledger interface {
	// Hold reads the slots held on every host, asks fits whether one
	// more for s is within the caps and, if so, records it, atomically
	// with the read: of hosts holding at once, each decides on the slots
	// every other holds. fits's refusal is returned as is; an error
	// wrapping store.ErrUnavailable when the ledger is out of reach. The
	// slot is held until release, or until this host loses it (OnLost).
	Hold(ctx context.Context, s store.Slot, fits func(store.Tally) error) (release func() error, err error)
	// OnLost registers f, called once this host may lose the slots it
	// holds (it could not renew its hold for most of its term): the
	// commands they count must stop before other hosts may take them.
	OnLost(f func())
}

// FenceGrace bounds the SIGTERM→SIGKILL delay of a fence: the commands
// must be dead before the ledger frees their slots (etcdstore fences
// DefaultSlotFence before it may).
const FenceGrace = time.Second

// sharedBusy is how long a wait for a slot polls the ledger at first, and
// at most: a slot freed on another host is seen within sharedPollMax, one
// freed here at once.
const (
	sharedPoll    = 25 * time.Millisecond
	sharedPollMax = time.Second
)

// holdShared takes a slot in the ledger for a request that needs no
// approval.
func (c *Controls) holdShared(cl *Claim) error {
	release, err := c.hold(context.Background(), cl)
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	cl.held, cl.release = true, release
	return nil
}

// hold takes a slot in the ledger for cl, or says why not.
func (c *Controls) hold(ctx context.Context, cl *Claim) (func() error, error) {
	release, err := c.ledger.Hold(ctx, store.Slot{Principal: cl.Principal, Rule: cl.Rule.Name},
		func(t store.Tally) error { return fits(cl, t) })
	var r *refusal.Error
	switch {
	case err == nil:
		return release, nil
	case errors.As(err, &r):
		return nil, err
	case errors.Is(err, store.ErrUnavailable):
		return nil, refusal.Wrap(refusal.StateUnavailable, err, "the concurrency slots shared by every host are out of reach; try another host or later")
	default:
		return nil, refusal.Wrap(refusal.Internal, err, "the concurrency slots shared by every host cannot be read")
	}
}

// waitShared is WaitSlot with a ledger: the request waits in the queue
// (where a lockout, shutdown or loss of the shared state ends it, as
// without one) and tries the ledger again whenever a slot is freed here,
// and every sharedPoll..sharedPollMax for one freed on another host.
// Across hosts, an approved request has no priority over new requests.
func (c *Controls) waitShared(ctx context.Context, cl *Claim) error {
	w := &slotWaiter{cl: cl, done: make(chan struct{})}
	c.mu.Lock()
	if done, err := c.settledLocked(cl); done {
		c.mu.Unlock()
		return err
	}
	c.slots.queue = append(c.slots.queue, w)
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		c.slots.queue = removeWaiter(c.slots.queue, w)
		c.mu.Unlock()
	}()
	for backoff := sharedPoll; ; backoff = min(2*backoff, sharedPollMax) {
		c.mu.Lock()
		freed := c.freed
		c.mu.Unlock()
		release, err := c.hold(ctx, cl)
		if done, err := c.granted(cl, w, release, err); done {
			return err
		}
		if ctx.Err() != nil {
			return refusal.Wrap(refusal.Internal, ctx.Err(), "request cancelled while waiting for a slot")
		}
		if refusal.As(err).Code != refusal.ConcurrencyBusy {
			return err
		}
		t := time.NewTimer(backoff)
		select {
		case <-w.done:
		case <-ctx.Done():
		case <-freed:
		case <-t.C:
		}
		t.Stop()
	}
}

// granted settles one attempt of waitShared: a wait ended meanwhile (a
// lockout, shutdown, loss of the shared state) gives the slot back and
// ends with its refusal; a slot held is the claim's. It reports whether
// the wait is over.
func (c *Controls) granted(cl *Claim, w *slotWaiter, release func() error, err error) (bool, error) {
	c.mu.Lock()
	select {
	case <-w.done:
		c.mu.Unlock()
		if release != nil {
			_ = release() // else its lease's expiry frees it
		}
		return true, w.err
	default:
	}
	defer c.mu.Unlock()
	if err != nil {
		return false, err
	}
	cl.held, cl.release = true, release
	c.slots.unwait(cl)
	return true, nil
}

// releaseShared gives back cl's slot in the ledger, if it holds one; a
// slot that cannot be given back (the ledger out of reach) is freed by the
// expiry of this host's hold. Waits here try again.
func (c *Controls) releaseShared(cl *Claim) {
	c.mu.Lock()
	release := cl.release
	held := cl.held
	cl.held, cl.release = false, nil
	c.mu.Unlock()
	if !held || release == nil {
		return
	}
	if err := release(); err != nil {
		c.cfg.Logger.Warn("a concurrency slot could not be freed yet: retried every second until it is or this host's hold ends", "err", err)
	}
	c.mu.Lock()
	close(c.freed)
	c.freed = make(chan struct{})
	c.mu.Unlock()
}

// fence stops every command of this host, because the ledger may free the
// slots they hold (OnLost): every wait for a slot ends state-unavailable,
// every job is signalled SIGTERM and, after the kill grace (at most
// FenceGrace), SIGKILL, each answered state-unavailable. It is not a
// lockout: new requests are refused only while the shared state is out of
// reach, as they are anyway.
func (c *Controls) fence() {
	why := refusal.New(refusal.StateUnavailable, "this host lost its hold on the shared concurrency slots: its commands are stopped before other hosts may take their slots")
	c.mu.Lock()
	c.slots.refuseQueued(why)
	jobs := make([]*Job, 0, len(c.jobs))
	for _, j := range c.jobs {
		jobs = append(jobs, j)
	}
	c.mu.Unlock()
	killed := 0
	for _, j := range jobs {
		if j.Signal(syscall.SIGTERM, refusal.StateUnavailable) {
			killed++
		}
	}
	c.cfg.Logger.Error("fence: this host lost its hold on the shared concurrency slots; its commands are killed", "killed", killed, "jobs", len(jobs))
	c.escalate(jobs, refusal.StateUnavailable, min(c.cfg.KillGrace, FenceGrace), nil)
}
