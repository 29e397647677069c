package stops

import (
	"errors"
	"maps"
	"syscall"
	"time"

	"coily.dev/coily/refusal"
	"coily.dev/coily/sandbox"
)

// Lockout puts the lockout st in force from this instant (a lockout
// already in force keeps its record, and already says so), ends every wait
// for a slot, signals every admitted command's process group and sandbox
// with SIGTERM and, after the kill grace, SIGKILL, then kills the sandboxes
// of the fleet (killSandboxes). It returns the lockout in force and how
// many running commands it signalled. Persisting it is PersistLockout's,
// after whatever else the caller does.
func (c *Controls) Lockout(st Stop) (inForce Stop, already bool, killed int) {
	c.mu.Lock()
	already = c.state.Lockout.Active
	if already {
		st = c.state.Lockout // keep the first lockout's record
	}
	c.state.Lockout = st
	c.slots.refuseQueued(lockoutRefusal(st))
	jobs := make([]*Job, 0, len(c.jobs))
	for _, j := range c.jobs {
		jobs = append(jobs, j)
	}
	boxes := c.cfg.Fleet.Snapshot()
	c.mu.Unlock()

	// Only commands that were running are counted as killed; an admitted
	// one that had not started yet is stopped before it starts.
	for _, j := range jobs {
		if j.Signal(syscall.SIGTERM, refusal.LockoutActive) {
			killed++
		}
	}
	c.escalate(jobs, refusal.LockoutActive, c.cfg.KillGrace, func() { c.killSandboxes(boxes, st) })
	return st, already, killed
}

// PersistLockout writes the lockout st to the store. The lockout is in
// force whether or not it could be; one that could not is unsaved.
func (c *Controls) PersistLockout(st Stop) error {
	err := c.cfg.Store.SetLockout(st)
	c.mu.Lock()
	defer c.mu.Unlock()
	if err == nil {
		c.unsaved.Lockout = Stop{}
	}
	c.unsavedLocked(func(u *State) { u.Lockout = st }, err)
	return err
}

// killSandboxes is a lockout's last step: it kills the sandboxes that
// were running at the lockout (boxes), whatever the job table says, and,
// if the lockout st is still in force, every sandbox and command cgroup of
// the server and every process of the uids it gives its commands (none may
// run under a lockout; one started after an unlock within the grace is
// left alone).
func (c *Controls) killSandboxes(boxes []*sandbox.Confinement, st Stop) {
	for _, b := range boxes {
		b.Kill()
	}
	c.mu.Lock()
	still := c.state.Lockout.Active && c.state.Lockout.Since.Equal(st.Since)
	c.mu.Unlock()
	if still {
		c.cfg.Fleet.Kill()
		c.cfg.UIDs.KillAll() // every process of every uid this server holds
	}
}

// escalate SIGKILLs the jobs' process groups after grace (why: the reason
// they are stopped), then runs then (if not nil).
func (c *Controls) escalate(jobs []*Job, why refusal.Code, grace time.Duration, then func()) {
	c.bg.Add(1)
	go func() {
		defer c.bg.Done()
		t := time.NewTimer(grace)
		defer t.Stop()
		select {
		case <-t.C:
		case <-c.quit:
		}
		for _, j := range jobs {
			j.Signal(syscall.SIGKILL, why)
		}
		if then != nil {
			then()
		}
	}()
}

// Unlock lifts the lockout, with the record st. It is a loosening: under
// the lock, allow is called first (it audits) and its error changes
// nothing; then st is persisted, and a failure is handed to refuse, whose
// error is returned, the server staying locked; only once persisted is it
// in force.
func (c *Controls) Unlock(st Stop, allow func() error, refuse func(error) error) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := allow(); err != nil {
		return err
	}
	if err := c.cfg.Store.SetLockout(c.decidedLocked(st)); err != nil {
		return refuse(err)
	}
	c.state.Lockout, c.unsaved.Lockout = st, Stop{}
	return nil
}

// decidedLocked is the loosening st decided on the state in force here: a
// shared store writes it only while what it lifts is still in force
// there (store.ErrChanged otherwise). Must hold c.mu.
func (c *Controls) decidedLocked(st Stop) Stop {
	decided := c.state
	decided.SelfPauses = maps.Clone(decided.SelfPauses)
	st.DecidedOn = &decided
	return st
}

// Pause pauses the server with the record st (a pause already in force
// keeps its record, and already says so). It is in force even if it cannot
// be persisted (persisted is the store's error). It returns how many jobs
// are admitted.
func (c *Controls) Pause(st Stop) (inForce Stop, already bool, running int, persisted error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	already = c.state.Pause.Active
	if already {
		st = c.state.Pause
	}
	c.state.Pause = st // a restriction: in force even if it cannot be persisted
	// Written under the lock, so that a Resume cannot land between memory
	// and file (the server would come back paused after a restart).
	persisted = c.cfg.Store.SetPause(st)
	c.unsavedLocked(func(u *State) { u.Pause = st }, persisted)
	return st, already, len(c.jobs), persisted
}

// PauseSelf pauses principal's own new commands with the record st (its
// pause already in force keeps its record), persisted like the server's
// pause and lifted by Resume. Memory and store change under the lock, so
// concurrent pauses and a Resume never leave them apart. It returns how
// many of principal's jobs are admitted.
func (c *Controls) PauseSelf(principal string, st Stop) (inForce Stop, running int, persisted error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if old, ok := c.state.SelfPauses[principal]; ok && old.Active {
		st = old
	}
	pauses := maps.Clone(c.state.SelfPauses)
	if pauses == nil {
		pauses = map[string]Stop{}
	}
	pauses[principal] = st
	c.state.SelfPauses = pauses // a restriction: in force even if it cannot be persisted
	persisted = c.cfg.Store.SetSelfPause(principal, st)
	c.unsavedLocked(func(u *State) {
		if u.SelfPauses == nil {
			u.SelfPauses = map[string]Stop{}
		}
		u.SelfPauses[principal] = st
	}, persisted)
	for _, j := range c.jobs {
		if j.principal == principal {
			running++
		}
	}
	return st, running, persisted
}

// Resume lifts the server's pause, with the record st, and every
// principal's pause of itself, together in one write or not at all. A
// loosening, like Unlock: allow, then persist (refuse on failure), then in
// force; decided on the state in force here, it lifts in a shared store
// only the pauses this host knows (store.ErrChanged otherwise).
func (c *Controls) Resume(st Stop, allow func() error, refuse func(error) error) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := allow(); err != nil {
		return err
	}
	if err := c.cfg.Store.SetPauses(c.decidedLocked(st), nil); err != nil {
		return refuse(err)
	}
	c.state.Pause, c.state.SelfPauses = st, nil
	c.unsaved.Pause, c.unsaved.SelfPauses = Stop{}, nil
	return nil
}

// Restore puts st in force at start and persists what changed: the lockout
// when lockout is set, the pauses when pauses is. It is in force even if a
// write fails (the error says which).
func (c *Controls) Restore(st State, lockout, pauses bool) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.state = st
	var errs []error
	if lockout {
		errs = append(errs, c.cfg.Store.SetLockout(st.Lockout))
	}
	if pauses {
		errs = append(errs, c.cfg.Store.SetPauses(st.Pause, st.SelfPauses))
	}
	return errors.Join(errs...)
}

// Shutdown refuses new commands and ends every wait for a slot, kills
// every running command at once (there will be no one left to answer),
// every sandbox of the fleet and every process of the server's uids.
// Wait waits for the escalations to end.
func (c *Controls) Shutdown() {
	c.mu.Lock()
	if !c.closing {
		close(c.quit)
	}
	c.closing = true
	c.slots.refuseQueued(refusal.New(refusal.Internal, "server is shutting down"))
	for _, j := range c.jobs {
		j.Signal(syscall.SIGKILL, refusal.Internal)
	}
	c.mu.Unlock()
	c.cfg.Fleet.Kill()
	c.cfg.UIDs.KillAll()
}

// Wait waits for the escalations of lockouts and kills to end.
func (c *Controls) Wait() { c.bg.Wait() }
