package stops

import (
	"errors"
	"maps"

	"coily.dev/coily/refusal"
)

// What another host decided, and whether this one can tell: the stop
// state several hosts share (package fleet keeps it in step).

// Apply puts in force the stop state st learnt from the shared state,
// without persisting it (it is already there). A lockout newly active is
// exactly a Lockout: waits for a slot refused, jobs signalled and, after
// the grace, killed, sandboxes killed; it returns how many running
// commands it signalled. A lockout lifted, a pause set or lifted and the
// principals' pauses of themselves are changed in memory. A restriction
// taken here that could not be persisted (Unsaved) is kept in force over
// a state that lacks it; one the shared state already holds is no longer
// unsaved, and the shared state's record stands. A loosening older than
// the restriction in force (by their records' times) is a state read
// before this host's own restriction was written: it lifts nothing. A
// restriction is put in force whatever its time.
func (c *Controls) Apply(st State) (killed int) {
	c.mu.Lock()
	st = c.keepUnsavedLocked(st)
	st = c.keepNewerLocked(st)
	newly := st.Lockout.Active && !c.state.Lockout.Active
	if !newly {
		// The shared record of a lockout in force here too stands: an
		// unlock is decided on it (decidedLocked).
		c.state.Lockout = st.Lockout
	}
	c.state.Pause, c.state.SelfPauses = st.Pause, st.SelfPauses
	c.mu.Unlock()
	if !newly {
		return 0
	}
	_, _, killed = c.Lockout(st.Lockout)
	return killed
}

// keepUnsavedLocked is st with the unsaved restrictions st lacks, and
// forgets those st holds. Must hold c.mu.
func (c *Controls) keepUnsavedLocked(st State) State {
	u := &c.unsaved
	if st.Lockout.Active {
		u.Lockout = Stop{}
	} else if u.Lockout.Active {
		st.Lockout = u.Lockout
	}
	if st.Pause.Active {
		u.Pause = Stop{}
	} else if u.Pause.Active {
		st.Pause = u.Pause
	}
	st.SelfPauses = maps.Clone(st.SelfPauses)
	for p, s := range u.SelfPauses {
		if st.SelfPauses[p].Active {
			delete(u.SelfPauses, p)
			continue
		}
		if st.SelfPauses == nil {
			st.SelfPauses = map[string]Stop{}
		}
		st.SelfPauses[p] = s
	}
	return st
}

// keepNewerLocked is st with each restriction in force here kept where
// st lifts it by a record older than it. Must hold c.mu.
func (c *Controls) keepNewerLocked(st State) State {
	resumed := st.Pause.Since
	if l := c.state.Lockout; l.Active && !st.Lockout.Active && st.Lockout.Since.Before(l.Since) {
		st.Lockout = l
	}
	if p := c.state.Pause; p.Active && !st.Pause.Active && st.Pause.Since.Before(p.Since) {
		st.Pause = p
	}
	for who, p := range c.state.SelfPauses {
		if !p.Active || st.SelfPauses[who].Active {
			continue
		}
		// A resume deletes the pauses of themselves: its record is the
		// server's pause's.
		lifted := resumed
		if r, ok := st.SelfPauses[who]; ok {
			lifted = r.Since
		}
		if lifted.Before(p.Since) {
			if st.SelfPauses == nil {
				st.SelfPauses = map[string]Stop{}
			}
			st.SelfPauses[who] = p
		}
	}
	return st
}

// Unsaved is the restrictions taken here that could not be persisted and
// are in force all the same: what a host cut from the shared state writes
// once it is back (PersistUnsaved).
func (c *Controls) Unsaved() State {
	c.mu.Lock()
	defer c.mu.Unlock()
	u := c.unsaved
	u.SelfPauses = maps.Clone(u.SelfPauses)
	return u
}

// PersistUnsaved writes the unsaved restrictions to the store and forgets
// each one written. A lifted stop is never written here: only the
// lockout, the pause and the pauses of themselves that are active.
func (c *Controls) PersistUnsaved() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	u := &c.unsaved
	var errs []error
	if u.Lockout.Active {
		err := c.cfg.Store.SetLockout(u.Lockout)
		if err == nil {
			u.Lockout = Stop{}
		}
		errs = append(errs, err)
	}
	if u.Pause.Active {
		err := c.cfg.Store.SetPause(u.Pause)
		if err == nil {
			u.Pause = Stop{}
		}
		errs = append(errs, err)
	}
	for p, s := range u.SelfPauses {
		err := c.cfg.Store.SetSelfPause(p, s)
		if err == nil {
			delete(u.SelfPauses, p)
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// unsavedLocked notes a restriction whose write failed. Must hold c.mu.
func (c *Controls) unsavedLocked(set func(u *State), err error) {
	if err != nil {
		set(&c.unsaved)
	}
}

// SetUnavailable says whether the shared state is in reach (err nil) or
// not. While it is not, this host cannot tell whether a lockout is in
// force elsewhere: every new request, and every wait for a slot, is
// refused state-unavailable before anything else is checked.
func (c *Controls) SetUnavailable(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err == nil {
		c.unavailable = nil
		return
	}
	c.unavailable = refusal.New(refusal.StateUnavailable,
		"the shared state is out of reach: this host cannot tell whether a lockout is in force; try another host or later")
	c.slots.refuseQueued(c.unavailable)
}

// Unavailable is the refusal in force while the shared state is out of
// reach, else nil.
func (c *Controls) Unavailable() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.unavailable
}
