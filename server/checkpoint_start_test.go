package server_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"coily.dev/coily/audit"
	"coily.dev/coily/internal/testserver"
	coilyv1 "coily.dev/coily/proto/coily/v1"
	"coily.dev/coily/refusal"
)

// auditFiles is the log's files, oldest first.
func auditFiles(t *testing.T, stateDir string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(stateDir, "audit", "*.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(files, func(a, b string) int { return strings.Compare(auditFileOrder(a), auditFileOrder(b)) })
	return files
}

// A log that does not hold the checkpoint the state file kept (records
// cut off its end, its newest file deleted, two files swapped, one record
// edited) is found at start: the server comes up locked out, the
// lockout's reason and the state.restore record naming the checkpoint's
// size and root and what the log has, and the repair; and stays so.
func TestStartLockedOutWhenTheLogDoesNotHoldTheCheckpoint(t *testing.T) {
	opts := testserver.Options{AuditMaxFileSize: 2 << 10, Checkpoints: true}
	for _, tc := range []struct {
		name   string
		damage func(t *testing.T, files []string)
		want   string
	}{
		{"the tail cut", func(t *testing.T, files []string) {
			last := files[len(files)-1]
			data, _ := os.ReadFile(last)
			lines := strings.SplitAfter(string(data), "\n")
			if err := os.WriteFile(last, []byte(strings.Join(lines[:len(lines)-3], "")), 0o600); err != nil {
				t.Fatal(err)
			}
		}, "removed from its end"},
		{"the newest file deleted", func(t *testing.T, files []string) { os.Remove(files[len(files)-1]) }, "removed from its end"},
		{"two files swapped", func(t *testing.T, files []string) {
			a, _ := os.ReadFile(files[1])
			b, _ := os.ReadFile(files[2])
			os.WriteFile(files[1], b, 0o600)
			os.WriteFile(files[2], a, 0o600)
		}, "were changed"},
		{"one record edited", func(t *testing.T, files []string) {
			data, _ := os.ReadFile(files[1])
			edited := strings.Replace(string(data), `"/bin/true"`, `"/bin/echo"`, 1)
			if edited == string(data) {
				t.Fatal("nothing to edit")
			}
			os.WriteFile(files[1], []byte(edited), 0o600)
		}, "were changed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := testserver.Start(t, opts)
			for range 12 {
				if r := execArgv(t, in, "/bin/true"); r.err != nil {
					t.Fatal(r.err)
				}
			}
			in.Stop()
			files := auditFiles(t, in.StateDir)
			if len(files) < 4 {
				t.Fatalf("%d audit files: want rotations", len(files))
			}
			tc.damage(t, files)
			for range 2 { // locked out, then persisted
				in = in.Restart(opts)
				st := stopsOf(t, in)
				if !strings.Contains(st.lockout, "does not hold the checkpoint") || !strings.Contains(st.lockout, tc.want) ||
					!strings.Contains(st.lockout, "coily unlock") {
					t.Fatalf("after the log was damaged: %+v", st)
				}
				wantCode(t, execArgv(t, in, "/bin/true").err, refusal.LockoutActive)
			}
			rec := lastEvent(t, in, "state.restore")
			if rec.Details["check"] != "checkpoint" || rec.Details["checkpoint_recorded"] == "" || rec.Details["checkpoint_found"] == "" ||
				rec.Details["lockout"] != "active" {
				t.Fatalf("state.restore record: %+v", rec)
			}
			if _, err := in.Client.API.Unlock(context.Background(), &coilyv1.UnlockRequest{Reason: "checked"}); err != nil {
				t.Fatal(err)
			}
			in = in.Restart(opts)
			if st := stopsOf(t, in); st.lockout != "" {
				t.Fatalf("unlocked, then restarted: %+v", st)
			}
		})
	}
}

// An older state file put back beside an intact log (its checkpoint is
// an older one the log extends): no alarm about the log, and the lockout
// or the pause taken after it comes back from the log.
func TestStartOlderStateFileWithCheckpoints(t *testing.T) {
	ctx := context.Background()
	opts := testserver.Options{AuditMaxFileSize: 2 << 10, Checkpoints: true}
	for _, tc := range []struct {
		name string
		stop func(t *testing.T, in *testserver.Instance)
		want func(stopState) bool
	}{
		{"a lockout", func(t *testing.T, in *testserver.Instance) {
			if _, err := in.Client.API.Lockout(ctx, &coilyv1.LockoutRequest{Reason: "drill"}); err != nil {
				t.Fatal(err)
			}
		}, func(s stopState) bool { return strings.Contains(s.lockout, "drill [restored at start") }},
		{"a pause, then a lockout", func(t *testing.T, in *testserver.Instance) {
			if _, err := in.Client.API.Pause(ctx, &coilyv1.PauseRequest{Reason: "maint"}); err != nil {
				t.Fatal(err)
			}
			if _, err := in.Client.API.Lockout(ctx, &coilyv1.LockoutRequest{Reason: "drill"}); err != nil {
				t.Fatal(err)
			}
		}, func(s stopState) bool {
			return strings.Contains(s.lockout, "drill [restored at start") && strings.Contains(s.pause, "maint [restored at start")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := testserver.Start(t, opts)
			for range 6 {
				execArgv(t, in, "/bin/true")
			}
			in.Stop()
			db, old := filepath.Join(in.StateDir, "coily.db"), filepath.Join(t.TempDir(), "old.db")
			copyFile(t, db, old)
			in = in.Restart(opts)
			for range 6 {
				execArgv(t, in, "/bin/true")
			}
			tc.stop(t, in)
			in.Stop()
			copyFile(t, old, db)
			in = in.Restart(opts)
			if st := stopsOf(t, in); !tc.want(st) || strings.Contains(st.lockout, "checkpoint") {
				t.Fatalf("an older state file put back: %+v", st)
			}
			rec := in.WaitAudit(t, isEvent("state.restore", ""))
			if rec.Details["check"] != "" {
				t.Fatalf("a false alarm about the log: %+v", rec)
			}
		})
	}
}

// No false alarm from the checkpoint check: a run with rotations, clean
// restarts, a crash between records and their checkpoint, and a torn
// tail mended by audit repair starts as open as it stopped, with no
// state.restore record.
func TestCheckpointCrossCheckQuiet(t *testing.T) {
	opts := testserver.Options{AuditMaxFileSize: 2 << 10, Checkpoints: true}
	in := testserver.Start(t, opts)
	for round := range 3 {
		for range 6 {
			if r := execArgv(t, in, "/bin/true"); r.err != nil {
				t.Fatal(r.err)
			}
		}
		in.Stop()
		switch round {
		case 1: // a crash: records after the last checkpoint
			al, err := audit.Open(audit.Config{Dir: in.Audit.Dir(), MaxFileSize: opts.AuditMaxFileSize})
			if err != nil {
				t.Fatal(err)
			}
			for range 5 {
				if _, err := al.Append(context.Background(), audit.Record{Event: "exec.decision", Decision: "refuse", Principal: "local"}); err != nil {
					t.Fatal(err)
				}
			}
			al.Close()
		case 2: // a torn tail, repaired
			files := auditFiles(t, in.StateDir)
			f, err := os.OpenFile(files[len(files)-1], os.O_APPEND|os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			f.WriteString(`{"seq":`)
			f.Close()
			if _, err := audit.Repair(audit.Config{Dir: in.Audit.Dir()}, "tester"); err != nil {
				t.Fatal(err)
			}
		}
		in = in.Restart(opts)
		if st := stopsOf(t, in); st.lockout != "" || st.pause != "" {
			t.Fatalf("round %d: restarted %+v", round, st)
		}
	}
	if n := len(auditFiles(t, in.StateDir)); n < 4 {
		t.Fatalf("%d audit files: want rotations", n)
	}
	rep, err := audit.Verify(in.Audit.Dir())
	if err != nil {
		t.Fatal(err)
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
	if _, err := in.Store().AuditCheckpoint(); err != nil {
		t.Fatalf("no checkpoint kept: %v", err)
	}
}

// lastEvent is the newest record of event among the log's last ones (its
// newest files only: an older one may have been edited).
func lastEvent(t *testing.T, in *testserver.Instance, event string) audit.Record {
	t.Helper()
	recs, err := in.Audit.Tail(20)
	if err != nil {
		t.Fatal(err)
	}
	for i := len(recs) - 1; i >= 0; i-- {
		if recs[i].Event == event {
			return recs[i]
		}
	}
	t.Fatalf("no %s record among the last 20", event)
	return audit.Record{}
}
