package etcdstore_test

import (
	"errors"
	"testing"
	"time"

	"coily.dev/coily/store"
)

func TestStops(t *testing.T) {
	h := threeHosts(t)
	st, err := h[0].Stops()
	if err != nil || st.Lockout.Active || st.Pause.Active || len(st.SelfPauses) != 0 {
		t.Fatalf("fresh stops %+v, %v: want none active", st, err)
	}
	since := time.Date(2026, 11, 29, 9, 0, 0, 0, time.UTC)
	lock := store.Stop{Active: true, By: "alice", Reason: "leak", Since: since}
	if err := h[0].SetLockout(lock); err != nil {
		t.Fatal(err)
	}
	if err := h[1].SetSelfPause("bot-a", store.Stop{Active: true, By: "bot-a", Since: since}); err != nil {
		t.Fatal(err)
	}
	// Another host's self-pause is kept: each is its own key.
	if err := h[2].SetSelfPause("bot/b", store.Stop{Active: true, By: "bot/b", Since: since}); err != nil {
		t.Fatal(err)
	}
	st, err = h[2].Stops()
	if err != nil {
		t.Fatal(err)
	}
	if st.Lockout != lock || !st.SelfPauses["bot-a"].Active || !st.SelfPauses["bot/b"].Active || len(st.SelfPauses) != 2 {
		t.Fatalf("stops %+v", st)
	}

	// SetPauses replaces the pause and every self-pause at once.
	pause := store.Stop{Active: true, By: "bob", Since: since}
	if err := h[1].SetPauses(pause, map[string]store.Stop{"bot-c": {Active: true, Since: since}}); err != nil {
		t.Fatal(err)
	}
	st, _ = h[0].Stops()
	if st.Pause != pause || len(st.SelfPauses) != 1 || !st.SelfPauses["bot-c"].Active {
		t.Fatalf("after SetPauses: %+v", st)
	}
	if err := h[1].SetPauses(store.Stop{}, nil); err != nil {
		t.Fatal(err)
	}
	if st, _ = h[0].Stops(); st.Pause.Active || len(st.SelfPauses) != 0 {
		t.Fatalf("after clearing: %+v", st)
	}
	if err := h[0].SetSelfPause("", store.Stop{Active: true}); err == nil {
		t.Fatal("a self-pause without a principal was written")
	}
}

// TestStopsCorrupt: an unreadable stop record is ErrCorrupt, never an
// inactive stop.
func TestStopsCorrupt(t *testing.T) {
	for name, kv := range map[string][2]string{
		"null lockout":       {"stops/lockout", "null"},
		"garbage pause":      {"stops/pause", "{"},
		"wrong type":         {"stops/lockout", `{"active":"yes"}`},
		"unknown stop":       {"stops/unlock", `{}`},
		"self-pause, no one": {"stops/pause.self/", `{"active":true}`},
		"self-pause, nested": {"stops/pause.self/a/b", `{"active":true}`},
		"self-pause, badesc": {"stops/pause.self/%zz", `{"active":true}`},
	} {
		t.Run(name, func(t *testing.T) {
			s := open(t)
			put(t, prefix(t)+kv[0], kv[1])
			_, err := s.Stops()
			wantErr(t, err, store.ErrCorrupt)
		})
	}
}

// A loosening decided on a state (DecidedOn) is written only while what
// it lifts is that state's: an unlock over no lockout, or over the one it
// read, is written; over another lockout, or a pause over a pause of
// itself it did not read, it is ErrChanged and nothing changes. A lockout
// is written over anything.
func TestLooseningDecidedOn(t *testing.T) {
	h := threeHosts(t)
	since := time.Date(2026, 11, 29, 9, 0, 0, 0, time.UTC)
	unlock := func(decided store.Stops) store.Stop {
		return store.Stop{By: "bob", Since: since.Add(time.Hour), DecidedOn: &decided}
	}
	if err := h[0].SetLockout(unlock(store.Stops{})); err != nil {
		t.Fatalf("an unlock over no lockout: %v", err)
	}
	l1 := store.Stop{Active: true, By: "alice", Reason: "one", Since: since}
	l2 := store.Stop{Active: true, By: "carol", Reason: "two", Since: since.Add(time.Minute)}
	for _, l := range []store.Stop{l1, l2} {
		if err := h[1].SetLockout(l); err != nil {
			t.Fatal(err)
		}
	}
	if err := h[0].SetLockout(unlock(store.Stops{Lockout: l1})); !errors.Is(err, store.ErrChanged) {
		t.Fatalf("an unlock decided on another lockout: %v, want ErrChanged", err)
	}
	if err := h[0].SetLockout(unlock(store.Stops{})); !errors.Is(err, store.ErrChanged) {
		t.Fatalf("an unlock decided on no lockout over one: %v, want ErrChanged", err)
	}
	if st, _ := h[2].Stops(); st.Lockout != l2 {
		t.Fatalf("lockout %+v after refused unlocks, want %+v", st.Lockout, l2)
	}
	if err := h[0].SetLockout(unlock(store.Stops{Lockout: l2})); err != nil {
		t.Fatalf("an unlock decided on the lockout in force: %v", err)
	}

	p := store.Stop{Active: true, By: "alice", Since: since}
	self := store.Stop{Active: true, By: "bot", Since: since}
	if err := h[1].SetPauses(p, nil); err != nil {
		t.Fatal(err)
	}
	if err := h[1].SetSelfPause("bot", self); err != nil {
		t.Fatal(err)
	}
	if err := h[0].SetPauses(unlock(store.Stops{Pause: p}), nil); !errors.Is(err, store.ErrChanged) {
		t.Fatalf("a resume that never read a pause of itself: %v, want ErrChanged", err)
	}
	if st, _ := h[2].Stops(); st.Pause != p || st.SelfPauses["bot"] != self {
		t.Fatalf("pauses %+v after a refused resume", st)
	}
	if err := h[0].SetPauses(unlock(store.Stops{Pause: p, SelfPauses: map[string]store.Stop{"bot": self}}), nil); err != nil {
		t.Fatalf("a resume decided on the pauses in force: %v", err)
	}
	if st, _ := h[2].Stops(); st.Pause.Active || len(st.SelfPauses) != 0 {
		t.Fatalf("pauses %+v after the resume", st)
	}
}
