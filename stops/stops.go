// Package stops owns what stops commands: the lockout, the server's pause
// and the principals' pauses of themselves, the job table of admitted
// commands, the concurrency slots and the requests waiting for them, and
// the per-workspace locks. The gRPC handlers that audit a stop live in the
// server; this package keeps the state and does the stopping.
//
// Invariants:
//   - the stop state, the shutdown flag, the job table and the slots are
//     guarded by one lock (Controls.mu), so that admitting a job is atomic
//     with the lockout check: a lockout either refuses a request or sees,
//     and kills, its job; and a wait for a slot is either refused by a
//     lockout or queued where the lockout ends it;
//   - a restriction (lockout, pause) is in force in memory before its
//     persistence is attempted; a loosening (unlock, resume) is audited,
//     then persisted, and only then in force;
//   - a lockout kills every command of every transport: the jobs it finds,
//     every sandbox of the fleet, and, while it is still in force after the
//     grace, every process of the uids the server gives its commands;
//   - with a Ledger (slots shared by several hosts, ledger.go) a slot is
//     taken and freed by an etcd call made without Controls.mu, so that a
//     slow cluster never holds up admission, lockouts or releases here.
//     What the lock made atomic stays so: a job is admitted (Admit) under
//     the lock with the lockout check, and the slot it takes later is
//     killed with it; a wait for a slot is queued under the lock, where a
//     lockout, shutdown or loss of the shared state ends it, and a slot
//     granted to a wait that was ended meanwhile is given back. A host
//     that loses its hold on its slots (Ledger.OnLost) kills its commands
//     (a fence) before another host may take their slots.
//
// Lock order: Controls.mu is taken before the audit log's locks (an unlock
// and a resume are audited under it) and never while a Job's own lock is
// held; Workspaces has a lock of its own, never held with another.
package stops

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"coily.dev/coily/refusal"
	"coily.dev/coily/sandbox"
	"coily.dev/coily/store"
)

// Stop is the state of one stop control, as persisted.
type Stop = store.Stop

// State is the state of every stop control, as persisted.
type State = store.Stops

// Store is where the stop state is persisted: what is kept, not how
// (every store.Shared is one). Each write is durable before it returns,
// and a state that cannot be read is an error, never an inactive stop.
type Store interface {
	// Stops reads the whole stop state.
	Stops() (State, error)
	// SetLockout persists the lockout.
	SetLockout(Stop) error
	// SetPause persists the server's pause.
	SetPause(Stop) error
	// SetSelfPause persists one principal's pause of itself, keeping the
	// others'.
	SetSelfPause(principal string, s Stop) error
	// SetPauses persists the server's pause and the principals' pauses of
	// themselves at once: both or neither.
	SetPauses(pause Stop, self map[string]Stop) error
}

var _ Store = store.Shared(nil)

// Config holds the controls' collaborators. Store is required.
type Config struct {
	Store Store
	// Fleet holds every sandbox started and not yet over: a lockout kills
	// them all by it.
	Fleet *sandbox.Fleet
	// UIDs gives a root server's commands a uid each; a lockout kills
	// every process of them (nil: none).
	UIDs *sandbox.UIDPool
	// KillGrace is the SIGTERM→SIGKILL delay of a lockout and a kill.
	KillGrace time.Duration
	Now       func() time.Time
	// Ledger keeps the concurrency slots of every host sharing it. When
	// nil and Store is a Ledger (etcd), Store is; else (bbolt) the slots
	// are this host's, counted in memory.
	Ledger Ledger
	Logger *slog.Logger
}

// Controls is the stop state of one server and what it stops.
type Controls struct {
	cfg Config

	mu    sync.Mutex
	state State
	jobs  map[string]*Job
	slots slots
	// ledger keeps the slots in use across hosts (nil: slots does);
	// freed is closed, and replaced, whenever a slot is freed here.
	ledger Ledger
	freed  chan struct{}
	// closing refuses new admissions once shutdown has begun.
	closing bool
	// unavailable refuses new admissions while the shared state is out
	// of reach (SetUnavailable); unsaved holds the restrictions taken
	// here that could not be persisted (Unsaved).
	unavailable error
	unsaved     State

	bg   sync.WaitGroup // escalations
	quit chan struct{}  // closed by Shutdown: escalations kill at once
}

// New returns controls restored to the stop state the store holds. An
// unreadable state is an error: the server must not start unlocked because
// it could not read that it was locked.
func New(cfg Config) (*Controls, error) {
	st, err := cfg.Store.Stops()
	if err != nil {
		return nil, err
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if l, ok := cfg.Store.(Ledger); ok && cfg.Ledger == nil {
		cfg.Ledger = l
	}
	c := &Controls{cfg: cfg, state: st, jobs: map[string]*Job{}, slots: newSlots(), ledger: cfg.Ledger,
		freed: make(chan struct{}), quit: make(chan struct{})}
	if c.ledger != nil {
		c.ledger.OnLost(c.fence)
	}
	return c, nil
}

// State returns the stop state in force and how many jobs are admitted.
func (c *Controls) State() (State, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.state, len(c.jobs)
}

// Persisted reads the stop state as the store holds it, without the
// controls' lock (an audit write may be made under it).
func (c *Controls) Persisted() (State, error) { return c.cfg.Store.Stops() }

// Closing reports whether shutdown has begun.
func (c *Controls) Closing() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closing
}

// Quit is closed once shutdown has begun.
func (c *Controls) Quit() <-chan struct{} { return c.quit }

// CheckLockout refuses while the server is locked out, or cannot tell
// (SetUnavailable).
func (c *Controls) CheckLockout() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.unavailable != nil {
		return c.unavailable
	}
	if l := c.state.Lockout; l.Active {
		return lockoutRefusal(l)
	}
	return nil
}

func lockoutRefusal(l Stop) error {
	return refusal.New(refusal.LockoutActive, "server is locked out since %s by %s; an operator must unlock it", l.Since.UTC().Format(time.RFC3339), l.By)
}

// Stopped is the refusal the stop state gives a new request of principal,
// if any.
func (c *Controls) Stopped(principal string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stoppedLocked(principal)
}

func (c *Controls) stoppedLocked(principal string) error {
	if c.closing {
		return refusal.New(refusal.Internal, "server is shutting down")
	}
	if c.unavailable != nil {
		return c.unavailable
	}
	if l := c.state.Lockout; l.Active {
		return lockoutRefusal(l)
	}
	if p := c.state.Pause; p.Active {
		return refusal.New(refusal.PauseActive, "server is paused since %s by %s", p.Since.UTC().Format(time.RFC3339), p.By)
	}
	if p, ok := c.state.SelfPauses[principal]; ok && p.Active {
		return refusal.New(refusal.PauseActive, "%s paused itself since %s; an owner resumes it (coily resume)", principal, p.Since.UTC().Format(time.RFC3339))
	}
	return nil
}

// haltedLocked is the refusal that ends every wait: shutdown, the shared
// state out of reach or lockout (a pause lets what was admitted before it
// run). Must hold c.mu.
func (c *Controls) haltedLocked() error {
	if c.closing {
		return refusal.New(refusal.Internal, "server is shutting down")
	}
	if c.unavailable != nil {
		return c.unavailable
	}
	if l := c.state.Lockout; l.Active {
		return lockoutRefusal(l)
	}
	return nil
}

// Admit checks the stop controls and, if they allow it, registers a job
// for the request id of principal under the same lock, so that a
// concurrent Lockout either refuses this request or sees (and kills) its
// job. cancel ends the request's context (a kill before it runs).
func (c *Controls) Admit(id, principal string, argv []string, cancel context.CancelCauseFunc) (*Job, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.stoppedLocked(principal); err != nil {
		return nil, err
	}
	j := &Job{id: id, principal: principal, argv: argv, admitted: c.cfg.Now(), cancel: cancel}
	c.jobs[id] = j
	return j, nil
}

// Release forgets a request's job (nil: none), frees its concurrency slot
// (handing it to an approved request waiting for one) and stops counting
// it as waiting. It is idempotent.
func (c *Controls) Release(j *Job, cl *Claim) {
	c.mu.Lock()
	if j != nil {
		delete(c.jobs, j.id)
	}
	c.slots.unwait(cl)
	if c.ledger == nil && c.slots.free(cl) {
		c.slots.handOff()
	}
	c.mu.Unlock()
	if c.ledger != nil {
		c.releaseShared(cl) // an etcd call: never under c.mu
	}
}
