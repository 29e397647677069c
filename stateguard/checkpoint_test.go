package stateguard

import (
	"context"
	"errors"
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

// The checkpoint the state file keeps is read fail closed: none is no
// alarm (a first start); one that does not open with the host's own key,
// or a record that does not decode, stops the start, naming it.
func TestCrossCheckKeptCheckpoint(t *testing.T) {
	skey, vkey, err := audit.GenerateSigner("coily/test")
	if err != nil {
		t.Fatal(err)
	}
	otherKey, _, err := audit.GenerateSigner("coily/test")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		keep func(t *testing.T, db *store.DB, tree audit.Tree)
		want string // in CrossCheck's error; "" = none
	}{
		{"none kept", func(*testing.T, *store.DB, audit.Tree) {}, ""},
		{"kept, the log holds it", func(t *testing.T, db *store.DB, tree audit.Tree) {
			keep(t, db, skey, vkey, tree)
		}, ""},
		{"signed by another key", func(t *testing.T, db *store.DB, tree audit.Tree) {
			keep(t, db, otherKey, vkey, tree)
		}, "bad checkpoint"},
		{"not a signed note", func(t *testing.T, db *store.DB, tree audit.Tree) {
			keepSigned(t, db, vkey, []byte("coily/test\n3\nAAAA\n"))
		}, "bad checkpoint"},
		{"kept without a key", func(t *testing.T, db *store.DB, tree audit.Tree) {
			msg, _ := audit.SignCheckpoint(skey, tree)
			if err := db.SetAuditCheckpoint(store.AuditCheckpoint{Signed: msg, At: time.Now()}); err != nil {
				t.Fatal(err)
			}
		}, "no key to open it"},
	} {
		t.Run(tc.name, func(t *testing.T) {
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
			tree, err := al.TreeHead()
			if err != nil {
				t.Fatal(err)
			}
			db, err := store.Open(filepath.Join(dir, "coily.db"))
			if err != nil {
				t.Fatal(err)
			}
			tc.keep(t, db, tree)
			if err := db.SetLockout(store.Stop{}); err != nil {
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
			g := New(Config{Audit: al, Local: db, Stops: controls, Record: al.Append, Log: slog.New(slog.DiscardHandler), Now: time.Now})
			err = g.CrossCheck()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("a false alarm: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("CrossCheck = %v, want an error naming %q", err, tc.want)
			case tc.want != "" && !strings.Contains(err.Error(), db.Path()):
				t.Fatalf("CrossCheck = %v, want it to name the state file", err)
			}
			if st, _ := controls.State(); st.Lockout.Active {
				t.Fatalf("locked out: %+v", st.Lockout)
			}
		})
	}
}

func keep(t *testing.T, db *store.DB, skey, vkey string, tree audit.Tree) {
	t.Helper()
	msg, err := audit.SignCheckpoint(skey, tree)
	if err != nil {
		t.Fatal(err)
	}
	keepSigned(t, db, vkey, msg)
}

func keepSigned(t *testing.T, db *store.DB, vkey string, msg []byte) {
	t.Helper()
	if _, err := db.EnsureAuditSigner(func() (string, string, error) { return "PRIVATE+KEY+x", vkey, nil }, time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := db.SetAuditCheckpoint(store.AuditCheckpoint{Signed: msg, At: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if _, err := db.AuditCheckpoint(); errors.Is(err, store.ErrCorrupt) {
		t.Fatal(err)
	}
}
