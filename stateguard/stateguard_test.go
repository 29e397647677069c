package stateguard

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"coily.dev/coily/access"
	"coily.dev/coily/audit"
	"coily.dev/coily/sandbox"
	"coily.dev/coily/stops"
	"coily.dev/coily/store"
)

// A log found short while the state file takes no writes: the server
// starts locked out all the same, audits that the lockout is not
// persisted, and keeps the recorded head as it was for the rest of the
// run (the state file writable again later), so that the next start
// finds the short log again.
func TestShortLogUnpersistedKeepsTheHead(t *testing.T) {
	dir := t.TempDir()
	al, err := audit.Open(audit.Config{Dir: filepath.Join(dir, "audit")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { al.Close() })
	for range 3 {
		if _, err := al.Append(context.Background(), audit.Record{Event: "exec.decision", Decision: "refuse"}); err != nil {
			t.Fatal(err)
		}
	}
	dbPath := filepath.Join(dir, "coily.db")
	recorded := store.AuditHead{Seq: 5, Hash: strings.Repeat("ab", 32)} // two records past the log's end
	rw, err := store.Open(dbPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := rw.SetAuditHead(recorded); err != nil {
		t.Fatal(err)
	}
	rw.Close()
	ro, err := store.OpenReadOnly(dbPath, store.OpenTimeout)
	if err != nil {
		t.Fatal(err)
	}
	controls, err := stops.New(stops.Config{Store: ro, Fleet: sandbox.NewFleet(), Now: time.Now})
	if err != nil {
		t.Fatal(err)
	}
	// record is the server's: every record written, the head anchored
	// after a change of the stop state.
	var g *Guard
	record := func(ctx context.Context, r audit.Record) (audit.Record, error) {
		out, err := al.Append(ctx, r)
		if err == nil && AnchorsHead(out) {
			g.Anchor()
		}
		return out, err
	}
	g = New(Config{Audit: al, Local: ro, Stops: controls, Record: record, Log: slog.New(slog.DiscardHandler), Now: time.Now})
	if err := g.CrossCheck(); err != nil {
		t.Fatal(err)
	}
	if st, _ := controls.State(); !st.Lockout.Active || !strings.Contains(st.Lockout.Reason, "records were removed") {
		t.Fatalf("started with lockout %+v", st.Lockout)
	}
	recs, err := audit.Tail(al.Dir(), 1)
	if err != nil || recs[0].Event != audit.EventStateRestore || recs[0].Code != "internal" || recs[0].Details["error"] == "" {
		t.Fatalf("state.restore record %+v %v", recs, err)
	}
	ro.Close()
	db, err := store.Open(dbPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	g.cfg.Local = db
	for range 5 { // past the recorded head, each one recording it
		rec := access.CallerRecord(access.ServerCaller, "", "lockout", "again")
		rec.Decision = "allow"
		if _, err := record(context.Background(), rec); err != nil {
			t.Fatal(err)
		}
	}
	if h, err := g.cfg.Local.AuditHead(); err != nil || h.Seq != recorded.Seq || h.Hash != recorded.Hash {
		t.Fatalf("the head became %+v, %v; want it kept at %+v", h, err, recorded)
	}
	var herr *audit.HeadError
	if err := audit.CheckHead(al.Dir(), audit.Head{Seq: recorded.Seq, Hash: recorded.Hash}); !errors.As(err, &herr) {
		t.Fatalf("the next start would not find it: %v", err)
	}
}

// crossCheck runs CrossCheck on a log whose last word is a lockout taken
// at logged, beside a state file that holds an unlock taken at unlocked,
// the stop state shared or not, and returns the lockout in force.
func crossCheck(t *testing.T, shared, unsaved bool, logged, unlocked time.Time) store.Stop {
	t.Helper()
	dir := t.TempDir()
	al, err := audit.Open(audit.Config{Dir: filepath.Join(dir, "audit"), Now: func() time.Time { return logged }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { al.Close() })
	rec := access.CallerRecord(access.ServerCaller, "", audit.EventLockout, "locked here")
	rec.Decision = "allow"
	if unsaved { // taken while the shared state was out of reach
		rec.Code, rec.Details = "state-unavailable", map[string]string{"error": "etcd out of reach"}
	}
	if _, err := al.Append(context.Background(), rec); err != nil {
		t.Fatal(err)
	}
	db, err := store.Open(filepath.Join(dir, "coily.db"))
	if err != nil {
		t.Fatal(err)
	}
	if err := db.SetLockout(store.Stop{By: "tag:b", Reason: "unlocked elsewhere", Since: unlocked}); err != nil {
		t.Fatal(err)
	}
	db.Close()
	if db, err = store.Open(filepath.Join(dir, "coily.db")); err != nil { // not new: the state was not lost
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	controls, err := stops.New(stops.Config{Store: db, Fleet: sandbox.NewFleet(), Now: time.Now})
	if err != nil {
		t.Fatal(err)
	}
	g := New(Config{Audit: al, Local: db, Stops: controls, Record: al.Append, Log: slog.New(slog.DiscardHandler),
		Now: time.Now, Shared: shared})
	if err := g.CrossCheck(); err != nil {
		t.Fatal(err)
	}
	st, _ := controls.State()
	if last, err := audit.Tail(al.Dir(), 1); err != nil || (!st.Lockout.Active && last[0].Event != audit.EventUnlockRemote) ||
		(unsaved && last[0].Event != audit.EventStateRestore) {
		t.Fatalf("an unlock from elsewhere not audited here: %+v %v", last, err)
	}
	return st.Lockout
}

// One host: a state file that says unlocked beside a log whose last word
// is a lockout is an older file put back (or forged), whatever its
// unlock's time: the lockout is restored. Shared (etcd): an unlock newer
// than the log's lockout is another host's, and stands (audited here as
// unlock.remote); an older one is an older state put back, and the
// lockout is restored.
func TestCrossCheckSharedUnlock(t *testing.T) {
	at := time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name     string
		shared   bool
		unsaved  bool
		unlocked time.Time
		want     bool
	}{
		{"one host, unlock newer", false, false, at.Add(time.Minute), true},
		{"one host, unlock older", false, false, at.Add(-time.Minute), true},
		{"shared, unlock newer", true, false, at.Add(time.Minute), false},
		{"shared, unlock older", true, false, at.Add(-time.Minute), true},
		{"shared, unlock at the same instant", true, false, at, true},
		{"shared, never set", true, false, time.Time{}, true},
		// Taken while cut off, never written: the unlock elsewhere, newer
		// as it is, lifted another lockout (found in review).
		{"shared, unlock newer, lockout never saved", true, true, at.Add(time.Minute), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := crossCheck(t, tc.shared, tc.unsaved, at, tc.unlocked); got.Active != tc.want {
				t.Fatalf("lockout in force %+v, want active %v", got, tc.want)
			}
		})
	}
}
