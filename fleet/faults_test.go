package fleet_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"coily.dev/coily/internal/poll"
	"coily.dev/coily/refusal"
	"coily.dev/coily/stops"
	"coily.dev/coily/store"
)

// failingStops is a host's stop store whose next SetLockouts fail as
// etcd's do when it has no leader for a moment: a unit seam, the rest is
// the real store.
type failingStops struct {
	stops.Store
	fail atomic.Int32
}

func (f *failingStops) SetLockout(st stops.Stop) error {
	if f.fail.Add(-1) >= 0 {
		return fmt.Errorf("injected: %w", store.ErrUnavailable)
	}
	return f.Store.SetLockout(st)
}

// stopMember stops member i of the cluster, restarted at the test's end
// if the test has not done it (the next test needs all three).
func stopMember(t *testing.T, i int) {
	t.Helper()
	cluster.Stop(i)
	t.Cleanup(func() {
		if cluster.Stopped(i) {
			if err := cluster.Restart(i); err != nil {
				t.Errorf("restart member %d: %v", i, err)
			}
		}
	})
}

func restartMember(t *testing.T, i int) {
	t.Helper()
	if err := cluster.Restart(i); err != nil {
		t.Fatal(err)
	}
}

func leader(t *testing.T) int {
	t.Helper()
	l := -1
	poll.Until(t, within, "a leader", func() bool { l = cluster.Leader(); return l >= 0 })
	return l
}

// A lockout whose write failed while the host stayed in reach of the
// cluster (no quorum for a moment, as while a leader is elected, and the
// host's health read fell between) is written all the same, and reaches
// every host: it waited for a reconnect that never came, and was lost to
// the others (fails before fleet wrote the unsaved stops on every health
// read).
func TestUnsavedLockoutWrittenWhileInReach(t *testing.T) {
	var first *failingStops
	h := hostsOn(t, func(s stops.Store) stops.Store {
		f := &failingStops{Store: s}
		if first == nil {
			first = f
		}
		return f
	})
	first.fail.Store(1)
	st, _, _ := h[0].ctl.Lockout(store.Stop{Active: true, By: "alice", Reason: "blip", Since: time.Now().UTC()})
	if err := h[0].ctl.PersistLockout(st); err == nil {
		t.Fatal("the injected failure did not fail the write")
	}
	if codeOf(h[0].ctl.Stopped("agent")) != refusal.LockoutActive {
		t.Fatal("the lockout is not in force on the host that took it")
	}
	for _, o := range h[1:] {
		waitCode(t, o, "the lockout whose write failed reaches the host", refusal.LockoutActive)
		lockedOutBy(t, o, "alice")
	}
	if u := h[0].ctl.Unsaved(); u.Lockout.Active {
		t.Fatalf("the lockout is still unsaved: %+v", u.Lockout)
	}
}
