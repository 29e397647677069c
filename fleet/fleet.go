// Package fleet keeps one coily host's stop controls in step with the
// stop state that several hosts share in etcd (store/etcdstore), so that a
// lockout taken on any host stops every host.
//
// Sync reads the stop state with its revision, puts it in force
// (stops.Controls.Apply) and watches the stop keys from the next
// revision, putting every change in force as it comes. A lockout learnt
// this way is a lockout here: the host's jobs and sandboxes are killed,
// its pending approvals rejected, its keystore's lockout hook run, and
// the lockout audited as lockout.remote with the revision it was read at.
//
// Invariants:
//   - while the shared state is out of reach (a health read failed or
//     took longer than its bound, or the watch ended), this host cannot
//     tell whether a lockout is in force elsewhere, so it refuses every
//     new request state-unavailable before anything else is checked
//     (stops.Controls.SetUnavailable) and says it is not ready;
//   - the host is available again only once it has, in this order, read
//     the stop state, put it in force (a lockout learnt late kills now),
//     written the lockout and pauses it took while cut off (kept in force
//     here all along; a lockout already in etcd keeps its record), and
//     started watching from the read's revision + 1: no change between
//     the read and the watch is missed;
//   - a lockout or pause taken here whose write failed while the host
//     stayed in reach (etcd without a leader for a moment) is written at
//     the next health read that succeeds, not at a reconnect that may
//     never come; if that write fails too, the host is out of reach;
//   - a lockout lifted or a pause changed elsewhere is applied in memory
//     only: it is in etcd already, and this host writes nothing back; a
//     lockout or pause lifted is audited here (unlock.remote,
//     resume.remote), so that this host's log, which its next start reads
//     (stateguard), does not say a stop is in force that is not.
package fleet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"coily.dev/coily/stops"
	"coily.dev/coily/store"
	"coily.dev/coily/store/etcdstore"
)

// Defaults for the Config fields left zero.
const (
	DefaultInterval = 500 * time.Millisecond
	DefaultTimeout  = time.Second
)

// Store is the shared stop state as Sync reads it (*etcdstore.Store).
type Store interface {
	// StopsAt reads the stop state and the revision it was read at.
	StopsAt() (store.Stops, int64, error)
	// Watch sends the stop state after every change from revision
	// fromRev on, or an error, until ctx ends.
	Watch(ctx context.Context, fromRev int64) <-chan etcdstore.StopsEvent
	// Health is nil when the cluster answers with a quorum.
	Health(ctx context.Context) error
}

var _ Store = (*etcdstore.Store)(nil)

// Controls are the host's stop controls (*stops.Controls).
type Controls interface {
	State() (stops.State, int)
	Apply(stops.State) (killed int)
	PersistUnsaved() error
	SetUnavailable(error)
}

var _ Controls = (*stops.Controls)(nil)

// Host is what the server does, beyond its stop controls, when a lockout
// taken elsewhere comes in force here (Lockouts is one).
type Host interface {
	LockedOut(ctx context.Context, st store.Stop, rev int64, killed int)
	// Loosened hears a loosening taken elsewhere that comes in force
	// here: the lockout lifted (unlock), or the pause or a pause of
	// itself lifted (resume); after is the stop state in force after it.
	Loosened(ctx context.Context, after store.Stops, rev int64, unlock, resume bool)
}

// Config says where the shared state is and how often to look.
type Config struct {
	Store Store
	// Interval is the time between health reads (DefaultInterval when
	// zero), and between attempts to reconnect.
	Interval time.Duration
	// Timeout bounds each health read (DefaultTimeout when zero).
	Timeout time.Duration
	Logger  *slog.Logger
	// LockoutLearnt, when set, hears each lockout taken elsewhere that
	// comes in force here (a metric's count).
	LockoutLearnt func()
}

// Sync keeps one host's stop controls in step with the shared state. A
// nil *Sync is a host alone: Start and Stop do nothing.
type Sync struct {
	cfg  Config
	ctl  Controls
	host Host

	cancel context.CancelFunc
	done   chan struct{}

	mu   sync.Mutex
	down bool // the last state reported, to log transitions once

	inStep atomic.Bool // Available
}

// Available reports whether the host is in step with the shared state and
// admits requests (false before the first sync and while cut off).
func (s *Sync) Available() bool { return s != nil && s.inStep.Load() }

// New returns a Sync of the shared state cfg.Store.
func New(cfg Config) *Sync {
	cfg.Interval = cmpDur(cfg.Interval, DefaultInterval)
	cfg.Timeout = cmpDur(cfg.Timeout, DefaultTimeout)
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Sync{cfg: cfg}
}

func cmpDur(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

// Start refuses new requests until the first sync is done, does it (a
// failure leaves the host unavailable, retried every Interval), then keeps
// the controls in step until Stop.
func (s *Sync) Start(ctl Controls, host Host) {
	if s == nil {
		return
	}
	s.ctl, s.host = ctl, host
	s.ctl.SetUnavailable(errors.New("fleet: not yet in step with the shared state"))
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel, s.done = cancel, make(chan struct{})
	events, stop, err := s.connect(ctx)
	go s.run(ctx, events, stop, err)
}

// Stop ends the sync and waits for it.
func (s *Sync) Stop() {
	if s == nil || s.cancel == nil {
		return
	}
	s.cancel()
	<-s.done
}

// run follows the shared state, reconnecting whenever it is lost.
func (s *Sync) run(ctx context.Context, events <-chan etcdstore.StopsEvent, stop context.CancelFunc, err error) {
	defer close(s.done)
	for {
		if err == nil {
			err = s.follow(ctx, events)
			stop()
		}
		if ctx.Err() != nil {
			return
		}
		s.unavailable(err)
		t := time.NewTimer(s.cfg.Interval)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		events, stop, err = s.connect(ctx)
	}
}

// connect brings the host in step, in order: read, apply, write what was
// taken here while cut off, watch from the read's revision + 1; only then
// is the host available. On error it stays unavailable.
func (s *Sync) connect(ctx context.Context) (<-chan etcdstore.StopsEvent, context.CancelFunc, error) {
	if err := s.health(ctx); err != nil {
		return nil, nil, err
	}
	st, rev, err := s.cfg.Store.StopsAt()
	if err != nil {
		return nil, nil, err
	}
	s.apply(ctx, st, rev)
	if err := s.ctl.PersistUnsaved(); err != nil {
		return nil, nil, fmt.Errorf("fleet: write the stops taken while cut off: %w", err)
	}
	wctx, stop := context.WithCancel(ctx)
	events := s.cfg.Store.Watch(wctx, rev+1)
	s.available(rev)
	return events, stop, nil
}

// follow applies every change the watch sends and, every Interval, reads
// the health and writes the stops whose write failed, until one of them
// fails or ctx ends.
func (s *Sync) follow(ctx context.Context, events <-chan etcdstore.StopsEvent) error {
	tick := time.NewTicker(s.cfg.Interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case ev, ok := <-events:
			switch {
			case !ok:
				return fmt.Errorf("fleet: the watch of the stops ended: %w", store.ErrUnavailable)
			case ev.Err != nil:
				return ev.Err
			}
			s.apply(ctx, ev.Stops, ev.Rev)
		case <-tick.C:
			if err := s.health(ctx); err != nil {
				return err
			}
			// A write of a stop that failed while the host stayed in
			// reach (no leader for a moment) waits for no reconnect.
			if err := s.ctl.PersistUnsaved(); err != nil {
				return fmt.Errorf("fleet: write the stops taken here: %w", err)
			}
		}
	}
}

func (s *Sync) health(ctx context.Context) error {
	hctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	return s.cfg.Store.Health(hctx)
}

// apply puts st, read at revision rev, in force; a lockout it brings is
// the host's too (Host.LockedOut).
func (s *Sync) apply(ctx context.Context, st store.Stops, rev int64) {
	before, _ := s.ctl.State()
	killed := s.ctl.Apply(st)
	if s.host != nil {
		after, _ := s.ctl.State()
		unlock, resume := loosened(before, after)
		if unlock || resume {
			s.host.Loosened(ctx, after, rev, unlock, resume)
		}
	}
	if !st.Lockout.Active || before.Lockout.Active {
		return
	}
	if s.cfg.LockoutLearnt != nil {
		s.cfg.LockoutLearnt()
	}
	if s.host != nil {
		s.host.LockedOut(ctx, st.Lockout, rev, killed)
	}
}

// loosened says whether the lockout, and whether the pause or a pause of
// itself, was in force before and is no longer after.
func loosened(before, after store.Stops) (unlock, resume bool) {
	unlock = before.Lockout.Active && !after.Lockout.Active
	resume = before.Pause.Active && !after.Pause.Active
	for who, p := range before.SelfPauses {
		if p.Active && !after.SelfPauses[who].Active {
			resume = true
		}
	}
	return unlock, resume
}

func (s *Sync) unavailable(err error) {
	s.inStep.Store(false)
	s.ctl.SetUnavailable(err)
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.down {
		s.cfg.Logger.Warn("shared state out of reach: refusing new requests", "err", err)
	}
	s.down = true
}

func (s *Sync) available(rev int64) {
	s.ctl.SetUnavailable(nil)
	s.inStep.Store(true)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.down {
		s.cfg.Logger.Info("shared state in reach again: in step", "revision", rev)
	}
	s.down = false
}
