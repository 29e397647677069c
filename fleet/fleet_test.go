package fleet_test

import (
	"errors"
	"testing"
	"time"

	"coily.dev/coily/internal/poll"
	"coily.dev/coily/refusal"
	"coily.dev/coily/stops"
	"coily.dev/coily/store"
)

const within = 15 * time.Second

func codeOf(err error) refusal.Code {
	var r *refusal.Error
	if errors.As(err, &r) {
		return r.Code
	}
	return ""
}

func waitAvailable(t testing.TB, h *host) {
	t.Helper()
	poll.Until(t, within, "the host is in step", func() bool { return h.ctl.Unavailable() == nil })
}

func waitCode(t *testing.T, h *host, what string, want refusal.Code) {
	t.Helper()
	poll.Until(t, within, what, func() bool { return codeOf(h.ctl.Stopped("agent")) == want })
}

func lockout(t *testing.T, h *host, by string) stops.Stop {
	t.Helper()
	st, _, _ := h.ctl.Lockout(store.Stop{Active: true, By: by, Reason: "test", Since: time.Now().UTC()})
	if err := h.ctl.PersistLockout(st); err != nil {
		t.Fatalf("persist the lockout: %v", err)
	}
	return st
}

func lockedOutBy(t *testing.T, h *host, by string) lockedOut {
	t.Helper()
	select {
	case l := <-h.locked:
		if l.st.By != by || l.rev == 0 {
			t.Fatalf("locked out by %q at revision %d, want %q", l.st.By, l.rev, by)
		}
		return l
	case <-time.After(within):
		t.Fatalf("no lockout from elsewhere within %v", within)
		return lockedOut{}
	}
}

// A lockout taken on one host comes in force on the others (a job there
// stopped, nothing admitted), each told of it once with its revision; the
// host that took it is not told; an unlock lifts it everywhere.
func TestLockoutReachesEveryHost(t *testing.T) {
	h := hosts(t)
	j, err := h[1].ctl.Admit("x", "agent", []string{"sleep"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	lockout(t, h[0], "alice")
	for _, o := range h[1:] {
		waitCode(t, o, "the lockout reaches the host", refusal.LockoutActive)
		lockedOutBy(t, o, "alice")
	}
	if j.StopReason() != refusal.LockoutActive {
		t.Fatalf("a job on another host stopped for %q", j.StopReason())
	}
	select {
	case l := <-h[0].locked:
		t.Fatalf("the host that took the lockout was told of it: %+v", l)
	default:
	}
	err = h[2].ctl.Unlock(store.Stop{By: "bob", Since: time.Now().UTC()}, func() error { return nil }, func(err error) error { return err })
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range h {
		poll.Until(t, within, "the unlock reaches every host", func() bool { return o.ctl.Stopped("agent") == nil })
	}
	// A pause follows too, and is no lockout.
	if _, _, _, err := h[0].ctl.Pause(store.Stop{Active: true, By: "carol", Since: time.Now().UTC()}); err != nil {
		t.Fatal(err)
	}
	waitCode(t, h[2], "the pause reaches the host", refusal.PauseActive)
	if len(h[2].locked) != 0 {
		t.Fatal("a pause was taken for a lockout")
	}
}

// A host cut from the cluster refuses state-unavailable; a lockout taken
// meanwhile elsewhere comes in force there once it is back, before it is
// available again.
func TestCutHostLearnsTheLockoutFirst(t *testing.T) {
	h := hosts(t)
	h[1].link.Cut()
	waitCode(t, h[1], "the cut host refuses", refusal.StateUnavailable)
	if codeOf(h[1].ctl.CheckLockout()) != refusal.StateUnavailable {
		t.Fatal("the gate's check admits on a cut host")
	}
	lockout(t, h[0], "alice")
	waitCode(t, h[2], "the lockout reaches the host in reach", refusal.LockoutActive)
	h[1].link.Heal()
	// The first answer other than state-unavailable is the lockout.
	poll.Until(t, within, "the healed host decides again", func() bool {
		switch code := codeOf(h[1].ctl.Stopped("agent")); code {
		case refusal.StateUnavailable:
			return false
		case refusal.LockoutActive:
			return true
		default:
			t.Fatalf("the healed host answered %q before the lockout", code)
			return true
		}
	})
	lockedOutBy(t, h[1], "alice")
}

// A lockout taken on a cut host is in force there at once and written to
// the cluster once it is back, so every host has it; a lockout already in
// the cluster keeps its first record.
func TestLockoutWhileCutIsWrittenOnHeal(t *testing.T) {
	h := hosts(t)
	h[1].link.Cut()
	waitCode(t, h[1], "the cut host refuses", refusal.StateUnavailable)
	st, _, _ := h[1].ctl.Lockout(store.Stop{Active: true, By: "bob", Reason: "cut", Since: time.Now().UTC()})
	if err := h[1].ctl.PersistLockout(st); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("persist on a cut host: %v", err)
	}
	h[1].link.Heal()
	waitAvailable(t, h[1])
	if codeOf(h[1].ctl.Stopped("agent")) != refusal.LockoutActive {
		t.Fatal("the cut host's own lockout was lifted on heal")
	}
	for _, i := range []int{0, 2} {
		waitCode(t, h[i], "the cut host's lockout reaches the others", refusal.LockoutActive)
		lockedOutBy(t, h[i], "bob")
	}

	// Unlocked; cut again and lock there while a lockout is taken
	// elsewhere: the cluster's record stands.
	err := h[0].ctl.Unlock(store.Stop{By: "op", Since: time.Now().UTC()}, func() error { return nil }, func(err error) error { return err })
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range h {
		poll.Until(t, within, "the unlock reaches every host", func() bool { return o.ctl.Stopped("agent") == nil })
	}
	h[2].link.Cut()
	waitCode(t, h[2], "the cut host refuses", refusal.StateUnavailable)
	late, _, _ := h[2].ctl.Lockout(store.Stop{Active: true, By: "late", Since: time.Now().UTC()})
	if err := h[2].ctl.PersistLockout(late); err == nil {
		t.Fatal("persisted on a cut host")
	}
	lockout(t, h[0], "first")
	h[2].link.Heal()
	waitAvailable(t, h[2])
	got, _, err := h[0].store.StopsAt()
	if err != nil || got.Lockout.By != "first" {
		t.Fatalf("stored lockout %+v (%v), want the first one's", got.Lockout, err)
	}
	if u := h[2].ctl.Unsaved(); u.Lockout.Active {
		t.Fatalf("the cut host still holds its lockout unsaved: %+v", u.Lockout)
	}
}
