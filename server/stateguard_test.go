package server_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

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

// stopState is what Status says of the stop controls: the lockout's and
// the pause's reasons ("" when inactive) and the self-paused principals.
type stopState struct {
	lockout, pause string
	self           []string
}

func stopsOf(t *testing.T, in *testserver.Instance) stopState {
	t.Helper()
	st, err := in.Client.API.Status(context.Background(), &coilyv1.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var out stopState
	if st.GetLockout().GetActive() {
		out.lockout = "locked out: " + st.GetLockout().GetReason()
	}
	if st.GetPause().GetActive() {
		out.pause = "paused: " + st.GetPause().GetReason()
	}
	for _, p := range st.GetSelfPauses() {
		out.self = append(out.self, p.GetPrincipal())
	}
	return out
}

// copyFile copies the file at src to dst (a state file, the server
// stopped).
func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// cutAuditBefore cuts the audit log back to the records before the first
// one match accepts, as an attacker who can write the state directory
// would: the rest of its file is cut off and later files are removed.
// What is left verifies.
func cutAuditBefore(t *testing.T, stateDir string, match func(audit.Record) bool) audit.Record {
	t.Helper()
	dir := filepath.Join(stateDir, "audit")
	files, err := filepath.Glob(filepath.Join(dir, "*.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(files, func(a, b string) int { return strings.Compare(auditFileOrder(a), auditFileOrder(b)) })
	for i, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		r := bufio.NewReader(bytes.NewReader(data))
		offset := 0
		for {
			line, err := r.ReadBytes('\n')
			if err == io.EOF {
				break
			}
			var rec audit.Record
			if err := json.Unmarshal(line, &rec); err != nil {
				t.Fatal(err)
			}
			if match(rec) {
				if err := os.Truncate(f, int64(offset)); err != nil {
					t.Fatal(err)
				}
				for _, later := range files[i+1:] {
					os.Remove(later)
				}
				if _, err := audit.Verify(dir); err != nil {
					t.Fatalf("the cut log does not verify: %v", err)
				}
				return rec
			}
			offset += len(line)
		}
	}
	t.Fatal("no record to cut the log before")
	return audit.Record{}
}

// auditFileOrder sorts YYYY-MM.jsonl before YYYY-MM.0001.jsonl.
func auditFileOrder(path string) string {
	base := strings.TrimSuffix(filepath.Base(path), ".jsonl")
	month, part, _ := strings.Cut(base, ".")
	return fmt.Sprintf("%s.%04s", month, part)
}

func isEvent(event, reason string) func(audit.Record) bool {
	return func(r audit.Record) bool { return r.Event == event && (reason == "" || r.Reason == reason) }
}

// A state file put back from before a pause, the server's or a principal's
// own, does not lift it: the audit log's pause is restored, persisted and
// audited.
func TestStartPausedWhenTheStateFileIsRolledBack(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		policy string // with one, on a tailnet
		// pause pauses as someone; exec runs as them.
		pause func(t *testing.T, in *testserver.Instance)
		exec  func(t *testing.T, in *testserver.Instance) error
		want  func(stopState) bool
	}{
		{"the server's pause", "", func(t *testing.T, in *testserver.Instance) {
			if _, err := in.Client.API.Pause(ctx, &coilyv1.PauseRequest{Reason: "maintenance"}); err != nil {
				t.Fatal(err)
			}
		}, func(t *testing.T, in *testserver.Instance) error { return execArgv(t, in, "/bin/true").err }, func(s stopState) bool {
			return strings.Contains(s.pause, "maintenance [restored at start from audit record") && s.lockout == "" && len(s.self) == 0
		}},
		{"an agent's pause of itself", tailnetPolicy, func(t *testing.T, in *testserver.Instance) {
			agent := in.TailnetClient(t, "ci-runner", "tag:agent")
			if p, err := agent.API.Pause(ctx, &coilyv1.PauseRequest{Reason: "stop me"}); err != nil || p.GetPause().GetPrincipal() != "tag:agent" {
				t.Fatalf("agent pause: %v %v", p, err)
			}
		}, func(t *testing.T, in *testserver.Instance) error {
			_, err := tailExec(t, in.TailnetClient(t, "ci-runner", "tag:agent"), "/bin/echo")
			return err
		}, func(s stopState) bool {
			return slices.Equal(s.self, []string{"tag:agent"}) && s.lockout == "" && s.pause == ""
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := testserver.Options{Policy: tc.policy, Tailnet: tc.policy != ""}
			in := testserver.Start(t, opts)
			if err := tc.exec(t, in); err != nil {
				t.Fatal(err)
			}
			in.Stop()
			db, old := filepath.Join(in.StateDir, "coily.db"), filepath.Join(t.TempDir(), "old.db")
			copyFile(t, db, old)
			in = in.Restart(opts)
			tc.pause(t, in)
			in.Stop()
			copyFile(t, old, db)
			for range 2 { // restored, then persisted
				in = in.Restart(opts)
				if st := stopsOf(t, in); !tc.want(st) {
					t.Fatalf("after the state file was rolled back: %+v", st)
				}
				wantCode(t, tc.exec(t, in), refusal.PauseActive)
			}
			rec := in.WaitAudit(t, isEvent("state.restore", ""))
			if rec.Details["state_file"] != db || (rec.Details["pause"] != "active" && rec.Details["self_pauses"] == "") {
				t.Fatalf("state.restore record: %+v", rec)
			}
		})
	}
}

// Records cut off the audit log's end, with or without a state file put
// back: the log no longer holds the head the state file recorded, so the
// server starts locked out, naming both, and stays so until unlocked.
func TestStartLockedOutWhenTheLogLostRecords(t *testing.T) {
	ctx := context.Background()
	lockout := func(t *testing.T, in *testserver.Instance, reason string) {
		t.Helper()
		if _, err := in.Client.API.Lockout(ctx, &coilyv1.LockoutRequest{Reason: reason}); err != nil {
			t.Fatal(err)
		}
	}
	unlock := func(t *testing.T, in *testserver.Instance) {
		t.Helper()
		if _, err := in.Client.API.Unlock(ctx, &coilyv1.UnlockRequest{Reason: "checked"}); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name string
		// run runs the server and damages what it left; it returns the
		// stopped instance.
		run func(t *testing.T, in *testserver.Instance) *testserver.Instance
	}{
		{"the tail cut", func(t *testing.T, in *testserver.Instance) *testserver.Instance {
			for range 3 {
				execArgv(t, in, "/bin/true")
			}
			in.Stop()
			n := 0
			cutAuditBefore(t, in.StateDir, func(r audit.Record) bool { n += btoi(r.Event == "exec.decision"); return n == 2 })
			return in
		}},
		{"cut before a lockout, the lockout cleared in the state file", func(t *testing.T, in *testserver.Instance) *testserver.Instance {
			lockout(t, in, "drill")
			in.Stop()
			cutAuditBefore(t, in.StateDir, isEvent("lockout", "drill"))
			s, err := store.Open(filepath.Join(in.StateDir, "coily.db"))
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if err := s.SetLockout(store.Stop{}); err != nil {
				t.Fatal(err)
			}
			return in
		}},
		{"cut before a lockout, an older state file put back", func(t *testing.T, in *testserver.Instance) *testserver.Instance {
			lockout(t, in, "first")
			unlock(t, in)
			execArgv(t, in, "/bin/true")
			in.Stop()
			db, old := filepath.Join(in.StateDir, "coily.db"), filepath.Join(t.TempDir(), "old.db")
			copyFile(t, db, old) // unlocked, its head past the first lockout
			in = in.Restart(testserver.Options{})
			lockout(t, in, "second")
			in.Stop()
			copyFile(t, old, db)
			cutAuditBefore(t, in.StateDir, isEvent("lockout", "first"))
			return in
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := testserver.Start(t, testserver.Options{})
			if r := execArgv(t, in, "/bin/true"); r.err != nil {
				t.Fatal(r.err)
			}
			in = tc.run(t, in)
			for range 2 { // locked out, then persisted
				in = in.Restart(testserver.Options{})
				st := stopsOf(t, in)
				if !strings.Contains(st.lockout, "records were removed") || !strings.Contains(st.lockout, "coily unlock") ||
					!strings.Contains(st.lockout, "coily.db") {
					t.Fatalf("after records were cut off the log: %+v", st)
				}
				wantCode(t, execArgv(t, in, "/bin/true").err, refusal.LockoutActive)
			}
			rec := in.WaitAudit(t, isEvent("state.restore", ""))
			if rec.Details["audit_head_recorded"] == "" || rec.Details["audit_head_found"] == "" || rec.Details["lockout"] != "active" {
				t.Fatalf("state.restore record: %+v", rec)
			}
			// Unlocked by an owner who looked, it starts open again: the
			// head is the log's as it is now.
			unlock(t, in)
			in = in.Restart(testserver.Options{})
			if st := stopsOf(t, in); st.lockout != "" {
				t.Fatalf("unlocked, then restarted: %+v", st)
			}
		})
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// No false alarm: a run with restarts, rotations, and every stop control
// set and lifted starts as open as it stopped, and records no
// state.restore; the state file's head moves forward and the log holds
// it.
func TestStateCrossCheckQuietOverANormalRun(t *testing.T) {
	ctx := context.Background()
	opts := testserver.Options{AuditMaxFileSize: 4 << 10}
	in := testserver.Start(t, opts)
	var last uint64
	for round := range 4 {
		for range 5 {
			if r := execArgv(t, in, "/bin/true"); r.err != nil {
				t.Fatal(r.err)
			}
		}
		if _, err := in.Client.API.Pause(ctx, &coilyv1.PauseRequest{Reason: "p"}); err != nil {
			t.Fatal(err)
		}
		if round%2 == 0 { // a restart paused, another locked out
			in = in.Restart(opts)
		}
		if _, err := in.Client.API.Resume(ctx, &coilyv1.ResumeRequest{}); err != nil {
			t.Fatal(err)
		}
		if _, err := in.Client.API.Lockout(ctx, &coilyv1.LockoutRequest{Reason: "l"}); err != nil {
			t.Fatal(err)
		}
		if round%2 == 1 {
			in = in.Restart(opts)
		}
		if _, err := in.Client.API.Unlock(ctx, &coilyv1.UnlockRequest{}); err != nil {
			t.Fatal(err)
		}
		in = in.Restart(opts)
		if st := stopsOf(t, in); st.lockout != "" || st.pause != "" || len(st.self) > 0 {
			t.Fatalf("round %d: restarted %+v", round, st)
		}
		h, err := in.Store().AuditHead()
		if err != nil || h.Seq <= last {
			t.Fatalf("round %d: head %+v (was %d) %v", round, h, last, err)
		}
		last = h.Seq
		if err := audit.CheckHead(in.Audit.Dir(), audit.Head{Seq: h.Seq, Hash: h.Hash}); err != nil {
			t.Fatal(err)
		}
	}
	rep, err := audit.Verify(in.Audit.Dir())
	if err != nil || rep.Files < 4 {
		t.Fatalf("verify: %+v %v (the log must have rotated)", rep, err)
	}
	recs, err := audit.Tail(in.Audit.Dir(), rep.Lines)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if r.Event == "state.restore" {
			t.Fatalf("a false alarm: %+v", r)
		}
	}
}
