package stops

import (
	"errors"
	"testing"
	"time"

	"coily.dev/coily/refusal"
	"coily.dev/coily/store"
)

// A lockout learnt from the shared state is a lockout (the job stopped,
// nothing admitted after it) and is not written back; an unlock learnt
// lifts it, and pauses follow the shared state, all in memory.
func TestApplyIsALockoutNotPersisted(t *testing.T) {
	m := &memStore{}
	c := newControls(t, m)
	j, err := c.Admit("a", "agent", []string{"true"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	remote := State{Lockout: stopped("elsewhere"), SelfPauses: map[string]Stop{"bot": stopped("bot")}}
	c.Apply(remote)
	if j.StopReason() != refusal.LockoutActive {
		t.Fatalf("job stopped for %q, want lockout", j.StopReason())
	}
	if _, err := c.Admit("b", "agent", nil, nil); codeOf(err) != refusal.LockoutActive {
		t.Fatalf("admitted under a lockout learnt: %v", err)
	}
	if m.writes != 0 {
		t.Fatalf("%d writes for a state learnt from the store", m.writes)
	}
	if killed := c.Apply(remote); killed != 0 {
		t.Fatalf("the same lockout again signalled %d", killed)
	}
	c.Apply(State{Lockout: Stop{By: "op", Since: time.Now()}, Pause: stopped("op")})
	if err := c.Stopped("agent"); codeOf(err) != refusal.PauseActive {
		t.Fatalf("after an unlock and a pause learnt: %v", err)
	}
	if st, _ := c.State(); st.Lockout.Active || len(st.SelfPauses) != 0 {
		t.Fatalf("state %+v, want the lockout and the self-pause lifted", st)
	}
	c.Apply(State{Pause: Stop{By: "op", Since: time.Now()}})
	if err := c.Stopped("agent"); err != nil || m.writes != 0 {
		t.Fatalf("after a resume learnt: %v, %d writes", err, m.writes)
	}
}

// A restriction taken while the store is out of reach stays in force over
// a shared state that lacks it, and is written once the store is back; one
// the shared state already holds is not written again.
func TestApplyKeepsUnsavedRestrictions(t *testing.T) {
	m := &memStore{fail: store.ErrUnavailable}
	c := newControls(t, m)
	st, _, _ := c.Lockout(stopped("here"))
	if err := c.PersistLockout(st); err == nil {
		t.Fatal("persisted while out of reach")
	}
	c.PauseSelf("bot", stopped("bot"))
	c.Apply(State{})
	if err := c.CheckLockout(); codeOf(err) != refusal.LockoutActive {
		t.Fatalf("an unsaved lockout was lifted by a state without it: %v", err)
	}
	if u := c.Unsaved(); !u.Lockout.Active || !u.SelfPauses["bot"].Active {
		t.Fatalf("unsaved %+v, want the lockout and bot's pause", u)
	}
	m.fail = nil
	if err := c.PersistUnsaved(); err != nil {
		t.Fatal(err)
	}
	if !m.st.Lockout.Active || m.st.Lockout.By != "here" || !m.st.SelfPauses["bot"].Active {
		t.Fatalf("stored %+v, want the unsaved lockout and pause", m.st)
	}
	if u := c.Unsaved(); u.Lockout.Active || len(u.SelfPauses) != 0 {
		t.Fatalf("unsaved after writing: %+v", u)
	}

	// A pause unsaved here, the shared state already paused: nothing to write.
	m.fail = store.ErrUnavailable
	c.Pause(stopped("here"))
	c.Apply(State{Lockout: m.st.Lockout, Pause: stopped("first")})
	m.fail = nil
	writes := m.writes
	if err := c.PersistUnsaved(); err != nil || m.writes != writes {
		t.Fatalf("wrote %d (%v) for a pause the shared state holds", m.writes-writes, err)
	}
}

// While the shared state is out of reach every new request is refused
// state-unavailable before the stops are looked at, the gate's check too;
// back in reach, the stops decide again.
func TestUnavailableRefusesFirst(t *testing.T) {
	c := newControls(t, &memStore{})
	c.Pause(stopped("op"))
	c.SetUnavailable(errors.New("cut"))
	if _, err := c.Admit("a", "agent", nil, nil); codeOf(err) != refusal.StateUnavailable {
		t.Fatalf("admit while unavailable: %v", err)
	}
	if err := c.CheckLockout(); codeOf(err) != refusal.StateUnavailable {
		t.Fatalf("check while unavailable: %v", err)
	}
	if c.Unavailable() == nil {
		t.Fatal("Unavailable says in reach")
	}
	c.SetUnavailable(nil)
	if err := c.Stopped("agent"); codeOf(err) != refusal.PauseActive || c.Unavailable() != nil {
		t.Fatalf("back in reach: %v", err)
	}
}

// A state read before this host's own restriction was written (its
// loosening older than the restriction) lifts nothing; a later loosening
// does; a restriction comes in force whatever its time.
func TestApplyIgnoresStaleLoosenings(t *testing.T) {
	c := newControls(t, &memStore{})
	t0 := time.Now()
	c.Lockout(Stop{Active: true, By: "here", Since: t0})
	c.Pause(Stop{Active: true, By: "here", Since: t0})
	c.PauseSelf("bot", Stop{Active: true, By: "bot", Since: t0})
	stale := State{Lockout: Stop{By: "op", Since: t0.Add(-time.Second)}, Pause: Stop{By: "op", Since: t0.Add(-time.Second)}}
	c.Apply(stale)
	if st, _ := c.State(); !st.Lockout.Active || !st.Pause.Active || !st.SelfPauses["bot"].Active {
		t.Fatalf("a stale state lifted %+v", st)
	}
	later := State{Lockout: Stop{By: "op", Since: t0.Add(time.Second)}, Pause: Stop{By: "op", Since: t0.Add(time.Second)}}
	c.Apply(later)
	if st, _ := c.State(); st.Lockout.Active || st.Pause.Active || len(st.SelfPauses) != 0 {
		t.Fatalf("a later unlock and resume left %+v", st)
	}
	c.Apply(State{Lockout: Stop{Active: true, By: "skewed", Since: t0.Add(-time.Hour)}})
	if err := c.CheckLockout(); codeOf(err) != refusal.LockoutActive {
		t.Fatalf("a lockout with an old time was not put in force: %v", err)
	}
}
