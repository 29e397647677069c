package sandbox

import "sync"

// Fleet is every sandbox a server has started whose processes may still
// run: the handle a lockout stops them all by, whatever the server's own
// tables say. Bubblewrap adds each confinement from Wrap to Close. Kill
// kills each one's processes (its cgroup, and bwrap, whose death ends the
// sandbox's PID namespace), marks it so that a start gate not yet open
// never opens, and kills every command cgroup of the server's subtree,
// those no confinement knows of included. A nil *Fleet does nothing.
type Fleet struct {
	mu      sync.Mutex
	live    map[*Confinement]struct{}
	cgroups *Cgroups
}

// NewFleet returns an empty fleet.
func NewFleet() *Fleet { return &Fleet{live: map[*Confinement]struct{}{}} }

// add registers c until remove.
func (f *Fleet) add(c *Confinement) {
	if f == nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.live[c] = struct{}{}
}

// remove forgets c (its run is over).
func (f *Fleet) remove(c *Confinement) {
	if f == nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.live, c)
}

// Len is the number of sandboxes that may still have processes.
func (f *Fleet) Len() int {
	if f == nil {
		return 0
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.live)
}

// Snapshot lists the sandboxes that may still have processes.
func (f *Fleet) Snapshot() []*Confinement {
	if f == nil {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	live := make([]*Confinement, 0, len(f.live))
	for c := range f.live {
		live = append(live, c)
	}
	return live
}

// Kill SIGKILLs every sandbox of the fleet, started or not (one not yet
// started never starts), and every command cgroup of the server. It
// returns how many sandboxes it reached.
func (f *Fleet) Kill() int {
	if f == nil {
		return 0
	}
	live := f.Snapshot()
	for _, c := range live {
		c.Kill()
	}
	f.mu.Lock()
	g := f.cgroups
	f.mu.Unlock()
	g.killAll()
	return len(live)
}
