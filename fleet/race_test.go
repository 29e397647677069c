package fleet_test

import (
	"errors"
	"testing"
	"time"

	"coily.dev/coily/refusal"
	"coily.dev/coily/store"
)

func allow() error { return nil }

func refuse(err error) error { return err }

// wantStored fails unless the shared state holds the lockout, pause and
// self-pause of principal "agent" active as want says.
func wantStored(t *testing.T, h *host, what string, lockout, pause, self bool) {
	t.Helper()
	st, err := h.store.Stops()
	if err != nil {
		t.Fatal(err)
	}
	if st.Lockout.Active != lockout || st.Pause.Active != pause || st.SelfPauses["agent"].Active != self {
		t.Fatalf("%s: stored lockout %v, pause %v, agent's pause %v; want %v, %v, %v", what,
			st.Lockout.Active, st.Pause.Active, st.SelfPauses["agent"].Active, lockout, pause, self)
	}
}

// Two hosts race: host B decides an unlock (a resume) on what it read,
// and before its write lands host A unlocks and locks out again (resumes
// and pauses again, or a principal pauses itself). B's loosening, decided
// on a lockout (a pause) no longer in force, must not lift the new one:
// it is refused as changed meanwhile, and the new stop stands. A lockout
// always wins: B locking out over anything is never refused.
func TestStaleLooseningLoses(t *testing.T) {
	h := hosts(t)
	a, b := h[0], h[1]
	lockout(t, a, "alice")
	waitCode(t, b, "the first lockout reaches B", refusal.LockoutActive)
	lockedOutBy(t, b, "alice")
	b.sync.Stop() // B decides on what it read: the race, held still
	if err := a.ctl.Unlock(store.Stop{By: "alice", Since: time.Now().UTC()}, allow, refuse); err != nil {
		t.Fatal(err)
	}
	lockout(t, a, "carol")
	err := b.ctl.Unlock(store.Stop{By: "bob", Since: time.Now().UTC()}, allow, refuse)
	if !errors.Is(err, store.ErrChanged) {
		t.Fatalf("B's unlock decided on a lockout lifted since: %v, want store.ErrChanged", err)
	}
	wantStored(t, a, "after B's stale unlock", true, false, false)
	if codeOf(b.ctl.Stopped("agent")) != refusal.LockoutActive {
		t.Fatal("B lifted its lockout in memory though its unlock was refused")
	}

	// The pause: B read P1; A resumes, then pauses (P2), and the agent
	// pauses itself; B's resume lifts neither.
	if err := a.ctl.Unlock(store.Stop{By: "alice", Since: time.Now().UTC()}, allow, refuse); err != nil {
		t.Fatal(err)
	}
	c := h[2]
	waitCode(t, c, "the unlock reaches C", "")
	if _, _, _, err := c.ctl.Pause(store.Stop{Active: true, By: "alice", Since: time.Now().UTC()}); err != nil {
		t.Fatal(err)
	}
	waitCode(t, a, "the pause reaches A", refusal.PauseActive)
	c.sync.Stop() // C decides on the pause it read
	if err := a.ctl.Resume(store.Stop{By: "alice", Since: time.Now().UTC()}, allow, refuse); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := a.ctl.Pause(store.Stop{Active: true, By: "carol", Since: time.Now().UTC()}); err != nil {
		t.Fatal(err)
	}
	if err := c.ctl.Resume(store.Stop{By: "bob", Since: time.Now().UTC()}, allow, refuse); !errors.Is(err, store.ErrChanged) {
		t.Fatalf("C's resume decided on a pause lifted since: %v, want store.ErrChanged", err)
	}
	wantStored(t, a, "after C's stale resume", false, true, false)
	if err := a.ctl.Resume(store.Stop{By: "alice", Since: time.Now().UTC()}, allow, refuse); err != nil {
		t.Fatal(err)
	}
	if _, _, err := a.ctl.PauseSelf("agent", store.Stop{Active: true, By: "agent", Since: time.Now().UTC()}); err != nil {
		t.Fatal(err)
	}
	// C still holds the pause it read, not the agent's pause of itself.
	if err := c.ctl.Resume(store.Stop{By: "bob", Since: time.Now().UTC()}, allow, refuse); !errors.Is(err, store.ErrChanged) {
		t.Fatalf("C's resume decided without the agent's pause of itself: %v, want store.ErrChanged", err)
	}
	wantStored(t, a, "after C's stale resume over a pause of itself", false, false, true)

	// A lockout over a state B read long ago is written all the same.
	lockout(t, b, "bob")
	wantStored(t, a, "after B's lockout", true, false, true)
}
