package server_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"coily.dev/coily/audit"
	"coily.dev/coily/internal/testserver"
	coilyv1 "coily.dev/coily/proto/coily/v1"
	"coily.dev/coily/refusal"
	"coily.dev/coily/store"
)

// The server never comes up more open than it went down: a state file
// lost, emptied or carrying an older state gives way to the audit log.
func TestStartNeverMoreOpenThanTheLog(t *testing.T) {
	ctx := context.Background()
	locked := func(t *testing.T, in *testserver.Instance, want string) {
		t.Helper()
		st, err := in.Client.API.Status(ctx, &coilyv1.StatusRequest{})
		if err != nil || !st.GetLockout().GetActive() || !strings.Contains(st.GetLockout().GetReason(), want) {
			t.Fatalf("status %v %v: want locked out, reason containing %q", st.GetLockout(), err, want)
		}
		wantCode(t, execArgv(t, in, "/bin/true").err, refusal.LockoutActive)
	}
	for _, tc := range []struct {
		name   string
		lock   bool // lock out before the damage
		damage func(t *testing.T, db string)
		want   string // in the lockout reason after restart; "" = unlocked
	}{
		{"state file deleted", false, func(t *testing.T, db string) { os.Remove(db) }, "missing or empty"},
		{"state file emptied", false, func(t *testing.T, db string) { os.Truncate(db, 0) }, "missing or empty"},
		{"locked, state file deleted", true, func(t *testing.T, db string) { os.Remove(db) }, "restored at start"},
		{"locked, state file says unlocked", true, func(t *testing.T, db string) {
			s, err := store.Open(db)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if err := s.SetLockout(store.Stop{}); err != nil {
				t.Fatal(err)
			}
		}, "restored at start"},
		{"nothing lost", false, func(*testing.T, string) {}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := testserver.Start(t, testserver.Options{})
			dir := in.StateDir
			if r := execArgv(t, in, "/bin/true"); r.err != nil {
				t.Fatal(r.err)
			}
			if tc.lock {
				if _, err := in.Client.API.Lockout(ctx, &coilyv1.LockoutRequest{Reason: "drill"}); err != nil {
					t.Fatal(err)
				}
			}
			in.Stop()
			tc.damage(t, filepath.Join(dir, "coily.db"))
			in = testserver.Start(t, testserver.Options{StateDir: dir})
			if tc.want == "" {
				if r := execArgv(t, in, "/bin/true"); r.err != nil {
					t.Fatalf("a clean restart is refused: %v", r.err)
				}
				return
			}
			locked(t, in, tc.want)
			rec := in.WaitAudit(t, func(r audit.Record) bool { return r.Event == "state.restore" })
			if rec.Details["state_file"] == "" {
				t.Errorf("state.restore record: %+v", rec)
			}
			// It is persisted: a second restart is locked too, by itself.
			in.Stop()
			in = testserver.Start(t, testserver.Options{StateDir: dir})
			locked(t, in, tc.want)
		})
	}
}

var _ = time.Second
