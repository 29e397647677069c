package etcdstore_test

import (
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
