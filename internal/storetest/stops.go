package storetest

import (
	"testing"
	"time"

	"coily.dev/coily/store"
)

func stops(t *testing.T, open func(t *testing.T) store.Shared) {
	t.Run("inactive when missing", func(t *testing.T) {
		s, err := open(t).Stops()
		if err != nil {
			t.Fatalf("Stops: %v", err)
		}
		if s.Lockout.Active || s.Pause.Active || len(s.SelfPauses) != 0 {
			t.Fatalf("fresh state has an active stop: %+v", s)
		}
	})
	t.Run("round trip", func(t *testing.T) { stopsRoundTrip(t, open(t)) })
	t.Run("self pause keeps the others'", func(t *testing.T) { selfPause(t, open(t)) })
	t.Run("set pauses replaces both at once", func(t *testing.T) { setPauses(t, open(t)) })
}

func sameStop(t *testing.T, name string, got, want store.Stop) {
	t.Helper()
	if got.Active != want.Active || got.By != want.By || got.Reason != want.Reason || !got.Since.Equal(want.Since) {
		t.Errorf("%s: got %+v, want %+v", name, got, want)
	}
}

func readStops(t *testing.T, d store.Shared) store.Stops {
	t.Helper()
	s, err := d.Stops()
	if err != nil {
		t.Fatalf("Stops: %v", err)
	}
	return s
}

func stopsRoundTrip(t *testing.T, d store.Shared) {
	since := time.Date(2026, 3, 4, 5, 6, 7, 890123456, time.FixedZone("x", 3600))
	lock := store.Stop{Active: true, By: "alice", Reason: "incident 42", Since: since}
	pause := store.Stop{Active: true, By: "bob", Reason: "maintenance", Since: since.Add(time.Minute)}
	if err := d.SetLockout(lock); err != nil {
		t.Fatalf("SetLockout: %v", err)
	}
	if err := d.SetPause(pause); err != nil {
		t.Fatalf("SetPause: %v", err)
	}
	s := readStops(t, d)
	sameStop(t, "lockout", s.Lockout, lock)
	sameStop(t, "pause", s.Pause, pause)
	// Clearing one leaves the other.
	unlock := store.Stop{By: "alice", Reason: "over", Since: since.Add(time.Hour)}
	if err := d.SetLockout(unlock); err != nil {
		t.Fatalf("SetLockout clear: %v", err)
	}
	s = readStops(t, d)
	sameStop(t, "lockout cleared", s.Lockout, unlock)
	sameStop(t, "pause kept", s.Pause, pause)
}

func selfPause(t *testing.T, d store.Shared) {
	since := time.Unix(1700000000, 0).UTC()
	agent := store.Stop{Active: true, By: "tag:agent", Reason: "stop me", Since: since}
	other := store.Stop{Active: true, By: "tag:other", Since: since.Add(time.Second)}
	if err := d.SetSelfPause("tag:agent", agent); err != nil {
		t.Fatal(err)
	}
	if err := d.SetSelfPause("tag:other", other); err != nil {
		t.Fatal(err)
	}
	s := readStops(t, d)
	if len(s.SelfPauses) != 2 || s.Pause.Active || s.Lockout.Active {
		t.Fatalf("after two self pauses: %+v", s)
	}
	sameStop(t, "tag:agent", s.SelfPauses["tag:agent"], agent)
	sameStop(t, "tag:other", s.SelfPauses["tag:other"], other)
	// Lifting one keeps the other.
	if err := d.SetSelfPause("tag:agent", store.Stop{By: "tag:agent"}); err != nil {
		t.Fatal(err)
	}
	s = readStops(t, d)
	if s.SelfPauses["tag:agent"].Active || !s.SelfPauses["tag:other"].Active {
		t.Fatalf("after lifting tag:agent's: %+v", s.SelfPauses)
	}
}

func setPauses(t *testing.T, d store.Shared) {
	since := time.Unix(1700000000, 0).UTC()
	for _, who := range []string{"tag:a", "tag:b"} {
		if err := d.SetSelfPause(who, store.Stop{Active: true, By: who, Since: since}); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.SetPause(store.Stop{Active: true, By: "local:op", Since: since}); err != nil {
		t.Fatal(err)
	}
	// A new map replaces the old one whole.
	c := store.Stop{Active: true, By: "tag:c", Since: since}
	if err := d.SetPauses(store.Stop{Active: true, By: "local:op", Since: since}, map[string]store.Stop{"tag:c": c}); err != nil {
		t.Fatal(err)
	}
	s := readStops(t, d)
	if len(s.SelfPauses) != 1 || !s.Pause.Active {
		t.Fatalf("after SetPauses with tag:c alone: %+v", s)
	}
	sameStop(t, "tag:c", s.SelfPauses["tag:c"], c)
	// Resume: both lifted in one write.
	resume := store.Stop{By: "local:op", Reason: "resume", Since: since.Add(time.Minute)}
	if err := d.SetPauses(resume, nil); err != nil {
		t.Fatal(err)
	}
	s = readStops(t, d)
	if len(s.SelfPauses) != 0 {
		t.Fatalf("after resume: self pauses %+v", s.SelfPauses)
	}
	sameStop(t, "pause after resume", s.Pause, resume)
}
