package fleet_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"coily.dev/coily/internal/etcdtest"
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

// everyRefuses waits until every server refuses lockout-active.
func everyRefuses(t *testing.T, ns []*node, what string) {
	t.Helper()
	for _, n := range ns {
		poll.Until(t, within, what, func() bool { return codeOf(n.exec("/bin/true")) == refusal.LockoutActive })
	}
}

// everyAdmits waits until every server admits.
func everyAdmits(t *testing.T, ns []*node, what string) {
	t.Helper()
	for _, n := range ns {
		poll.Until(t, within, what, func() bool { return n.exec("/bin/true") == nil })
	}
}

// A member killed: every server goes on admitting (each reaches the
// other two), a running command is left alone, and a lockout taken on
// the server whose own member is down succeeds and reaches every server.
// Restarted, the member catches up: with another member down, the
// quorum is the restarted one and the third, and a lockout still reaches
// every server.
func TestMemberKilledAndRestarted(t *testing.T) {
	ns := servers(t)
	v := (leader(t) + 1) % 3 // a follower; the leader has its own test
	running := ns[v].sleep(t)
	stopMember(t, v)
	everyAdmits(t, ns[:], "a server admits with a member down")
	if !alive(running.pid) {
		t.Fatal("a member down killed a running command")
	}
	if err := ns[v].lockout(t, "member down"); err != nil {
		t.Fatalf("a lockout with a quorum: %v", err)
	}
	everyRefuses(t, ns[:], "the lockout reaches every server with a member down")
	deadAfter(t, time.Now(), running.pid)
	running.wantStopped(t, refusal.LockoutActive)
	ns[(v+1)%3].unlock(t)
	everyAdmits(t, ns[:], "the unlock reaches every server")

	restartMember(t, v)
	w := (v + 1) % 3
	stopMember(t, w)
	everyAdmits(t, ns[:], "a server admits on the restarted member's quorum")
	if err := ns[w].lockout(t, "restarted member in the quorum"); err != nil {
		t.Fatalf("a lockout on the restarted member's quorum: %v", err)
	}
	everyRefuses(t, ns[:], "the lockout reaches every server on the restarted member's quorum")
	restartMember(t, w)
	ns[0].unlock(t)
	everyAdmits(t, ns[:], "the unlock reaches every server")
}

// The leader killed while a lockout is being taken: the call returns
// success and then every server refuses and every child is dead, or it
// returns an error and the server that took it refuses at once (the
// lockout in force there) and writes it once it can, so every server
// refuses and every child dies all the same. Never lost. Two rounds: the
// lockout taken on the server whose own member leads, then on another.
func TestLeaderKilledMidLockout(t *testing.T) {
	ns := servers(t)
	for r := range 2 {
		slotsFreed(t, ns[0])
		l := leader(t)
		taker := ns[(l+r)%3]
		var kids []sleeper
		for _, n := range ns {
			kids = append(kids, n.sleep(t))
		}
		done := make(chan error, 1)
		go func() { done <- taker.lockout(t, fmt.Sprint("leader killed, round ", r)) }()
		stopMember(t, l)
		var err error
		select {
		case err = <-done:
		case <-time.After(within):
			t.Fatal("the lockout call did not return")
		}
		t.Logf("round %d: the lockout on server %d, leader %d killed: %v", r, (l+r)%3, l, err)
		if err != nil {
			// Refused at once, whatever the cluster does: no poll.
			if code := codeOf(taker.exec("/bin/true")); code != refusal.LockoutActive && code != refusal.StateUnavailable {
				t.Fatalf("the server whose lockout call failed answered %q", code)
			}
		}
		everyRefuses(t, ns[:], "the lockout reaches every server")
		var pids []int
		for _, k := range kids {
			pids = append(pids, k.pid)
		}
		deadAfter(t, time.Now(), pids...)
		for _, k := range kids {
			k.wantStopped(t, refusal.LockoutActive)
		}
		restartMember(t, l)
		st, _, err := ns[l].store.StopsAt()
		if err != nil || !st.Lockout.Active {
			t.Fatalf("stored lockout after the restart: %+v (%v)", st.Lockout, err)
		}
		everyRefuses(t, ns[:], "every server still refuses after the restart")
		ns[(l+1)%3].unlock(t)
		everyAdmits(t, ns[:], "the unlock reaches every server")
	}
}

// A server whose link to the cluster goes down silently (no reset: the
// connections stay open and carry nothing, as behind a dead link or a
// network namespace's interface down) learns it from its health read's
// timeout and refuses state-unavailable; a lockout taken meanwhile
// elsewhere kills its running command once the link is up, before it
// admits anything.
func TestBlackholedServer(t *testing.T) {
	lockoutWhileOff(t, servers(t), "blackholed", (*etcdtest.Link).Blackhole)
}
