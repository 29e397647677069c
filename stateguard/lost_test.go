package stateguard

import (
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"coily.dev/coily/audit"
	"coily.dev/coily/sandbox"
	"coily.dev/coily/stops"
	"coily.dev/coily/store"
)

// TestLostElsewhereLocksOut: a loss of records found at start outside
// the state file (Config.Lost: a witness holds more) starts the server
// locked out, persisted, and audits what found it; the state file and
// the log agreeing with each other does not lift it.
func TestLostElsewhereLocksOut(t *testing.T) {
	dir := t.TempDir()
	al, err := audit.Open(audit.Config{Dir: filepath.Join(dir, "audit")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { al.Close() })
	if _, err := al.Append(context.Background(), audit.Record{Event: "exec.decision", Decision: "refuse"}); err != nil {
		t.Fatal(err)
	}
	db, err := store.Open(filepath.Join(dir, "coily.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	controls, err := stops.New(stops.Config{Store: db, Fleet: sandbox.NewFleet(), Now: time.Now})
	if err != nil {
		t.Fatal(err)
	}
	why := "witness http://w holds 9 records, the log 1: run coily audit verify --checkpoint http://w"
	g := New(Config{Audit: al, Local: db, Stops: controls, Record: al.Append, Log: slog.New(slog.DiscardHandler), Now: time.Now,
		Lost: []Lost{{Why: why, Details: map[string]string{"witness": "http://w", "witness_size": "9"}}}})
	if err := g.CrossCheck(); err != nil {
		t.Fatal(err)
	}
	if st, _ := controls.State(); !st.Lockout.Active || !strings.Contains(st.Lockout.Reason, why) {
		t.Fatalf("started with lockout %+v", st.Lockout)
	}
	if st, err := db.Stops(); err != nil || !st.Lockout.Active {
		t.Fatalf("the lockout is not persisted: %+v %v", st.Lockout, err)
	}
	recs, err := audit.Tail(al.Dir(), 1)
	if err != nil || recs[0].Event != audit.EventStateRestore || recs[0].Details["witness_size"] != "9" || recs[0].Details[audit.CheckpointLockout] != "active" {
		t.Fatalf("state.restore record %+v %v", recs, err)
	}
}
