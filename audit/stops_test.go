package audit

import (
	"context"
	"maps"
	"slices"
	"strings"
	"testing"
)

// stopLog is a log whose checkpoints carry the stop state as a server's
// do: the state follows the records appended (add), as the server's state
// file does.
type stopLog struct {
	t     *testing.T
	l     *Log
	dir   string
	clock *clock
	state Stops
}

func newStopLog(t *testing.T, maxSize int64) *stopLog {
	sl := &stopLog{t: t, dir: t.TempDir(), clock: newClock(oct)}
	var err error
	sl.l, err = Open(Config{Dir: sl.dir, Now: sl.clock.Now, MaxFileSize: maxSize,
		Checkpoint: func() map[string]string { return sl.state.CheckpointDetails() }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sl.l.Close() })
	return sl
}

func (sl *stopLog) add(r Record) {
	sl.t.Helper()
	if _, err := sl.l.Append(context.Background(), r); err != nil {
		sl.t.Fatal(err)
	}
	st := &sl.state
	switch {
	case r.Event == EventLockout && !st.Lockout.Active:
		st.Lockout = Stop{Active: true, By: r.Principal}
	case r.Event == EventUnlock && r.Decision == "allow":
		st.Lockout = Stop{By: r.Principal}
	case r.Event == EventPause && r.Details["scope"] == "self":
		self := maps.Clone(st.SelfPauses)
		if self == nil {
			self = map[string]Stop{}
		}
		self[r.Principal] = Stop{Active: true, By: r.Principal}
		st.SelfPauses = self
	case r.Event == EventPause && !st.Pause.Active:
		st.Pause = Stop{Active: true, By: r.Principal}
	case r.Event == EventResume && r.Decision == "allow":
		st.Pause, st.SelfPauses = Stop{By: r.Principal}, nil
	}
}

// check compares LastStops with the lockout, the pause (by whom, "" for
// inactive) and the self-paused principals.
func (sl *stopLog) check(lockoutBy, pauseBy string, self ...string) {
	sl.t.Helper()
	st, err := LastStops(sl.dir)
	if err != nil {
		sl.t.Fatal(err)
	}
	got := []string{describeStop(st.Lockout), describeStop(st.Pause), strings.Join(slices.Sorted(maps.Keys(st.SelfPauses)), ",")}
	want := []string{lockoutBy, pauseBy, strings.Join(self, ",")}
	if !slices.Equal(got, want) {
		sl.t.Fatalf("LastStops: lockout, pause, self-pauses = %q; want %q", got, want)
	}
}

func describeStop(s Stop) string {
	if !s.Active {
		return ""
	}
	return s.By
}

// The stop state the log tells: lockouts, unlocks, pauses of the server
// and of principals themselves, resumes, each one's persisting failures,
// and checkpoints.
func TestLastStops(t *testing.T) {
	if st, err := LastStops(t.TempDir()); err != nil || st.Lockout.Known || st.Pause.Known || st.SelfPauses != nil {
		t.Fatalf("empty log: %+v %v", st, err)
	}
	sl := newStopLog(t, 1<<20)
	sl.add(Record{Event: "exec.decision", Decision: "allow"})
	sl.check("", "")
	sl.add(Record{Event: EventLockout, Decision: "allow", Principal: "tag:owner", Reason: "r"})
	sl.check("tag:owner", "")
	sl.add(Record{Event: EventLockout, Decision: "allow", Principal: "tag:other"})
	sl.check("tag:owner", "") // the first lockout's record stands
	sl.add(Record{Event: EventUnlock, Decision: "refuse", Code: "permission-denied", Principal: "tag:agent"})
	sl.check("tag:owner", "")
	sl.add(Record{Event: EventUnlock, Decision: "allow", Principal: "local:root"})
	sl.check("", "")
	sl.add(Record{Event: EventUnlock, Decision: "refuse", Code: "internal", Principal: "local:root"})
	sl.check("local:root", "") // not persisted: still locked
	sl.add(Record{Event: EventUnlock, Decision: "allow", Principal: "local:root"})
	sl.check("", "")

	sl.add(Record{Event: EventPause, Decision: "refuse", Code: "permission-denied", Principal: "tag:agent"})
	sl.check("", "")
	sl.add(Record{Event: EventPause, Decision: "allow", Principal: "tag:owner"})
	sl.check("", "tag:owner")
	sl.add(Record{Event: EventPause, Decision: "allow", Code: "internal", Principal: "tag:other"})
	sl.check("", "tag:owner") // in force unpersisted; the first pause's record stands
	sl.add(Record{Event: EventPause, Decision: "allow", Principal: "tag:agent", Details: map[string]string{"scope": "self"}})
	sl.add(Record{Event: EventPause, Decision: "allow", Principal: "tag:ci", Details: map[string]string{"scope": "self"}})
	sl.check("", "tag:owner", "tag:agent", "tag:ci")
	sl.add(Record{Event: EventResume, Decision: "refuse", Code: "permission-denied", Principal: "tag:agent"})
	sl.check("", "tag:owner", "tag:agent", "tag:ci")
	sl.add(Record{Event: EventResume, Decision: "allow", Principal: "local:root"})
	sl.check("", "")
	sl.add(Record{Event: EventResume, Decision: "refuse", Code: "internal", Principal: "local:root"})
	sl.check("", "tag:owner", "tag:agent", "tag:ci") // not persisted: every pause stands
	sl.add(Record{Event: EventResume, Decision: "allow", Principal: "local:root"})
	sl.check("", "")
	sl.add(Record{Event: EventPause, Decision: "allow", Principal: "tag:agent", Details: map[string]string{"scope": "self"}})
	sl.add(Record{Event: EventResume, Decision: "refuse", Code: "internal", Principal: "local:root"})
	sl.check("", "", "tag:agent") // no resume to undo: the pause since stands
}

// Another host's loosening, learnt through the shared state, is read as
// one: unlock.remote lifts the lockout, resume.remote sets the pauses its
// details carry (a self-pause it still names stands).
func TestLastStopsRemoteLoosenings(t *testing.T) {
	sl := newStopLog(t, 1<<20)
	sl.add(Record{Event: EventLockout, Decision: "allow", Principal: "tag:owner"})
	sl.add(Record{Event: EventPause, Decision: "allow", Principal: "tag:owner"})
	sl.add(Record{Event: EventPause, Decision: "allow", Principal: "tag:agent", Details: map[string]string{"scope": "self"}})
	sl.check("tag:owner", "tag:owner", "tag:agent")
	sl.add(Record{Event: EventUnlockRemote, Decision: "allow", Principal: "server", Details: map[string]string{"by": "tag:b"}})
	sl.check("", "tag:owner", "tag:agent")
	sl.add(Record{Event: EventResumeRemote, Decision: "allow", Principal: "server", Details: map[string]string{
		CheckpointPause: "inactive", CheckpointSelfPauses: `{"tag:agent":"2026-10-01T00:00:00Z"}`}})
	sl.check("", "", "tag:agent")
	sl.add(Record{Event: EventResumeRemote, Decision: "allow", Principal: "server", Details: map[string]string{
		CheckpointPause: "inactive", CheckpointSelfPauses: `{}`}})
	sl.check("", "")
	// A remote loosening refused (never written so) lifts nothing.
	sl.add(Record{Event: EventLockout, Decision: "allow", Principal: "tag:owner"})
	sl.add(Record{Event: EventUnlockRemote, Decision: "refuse", Principal: "server"})
	sl.check("tag:owner", "")
}

// A checkpoint's word wins over the records before it, part by part, and
// reading begins at the newest file whose checkpoint carries every part.
func TestLastStopsCheckpoints(t *testing.T) {
	sl := newStopLog(t, 1<<10)
	sl.add(Record{Event: EventLockout, Decision: "allow", Principal: "tag:owner"})
	sl.add(Record{Event: EventPause, Decision: "allow", Principal: "tag:agent", Details: map[string]string{"scope": "self"}})
	// What the state file says goes into the next checkpoint.
	sl.state = Stops{Lockout: Stop{Active: true, By: "cp"}, Pause: Stop{Active: true, By: "cp-pause"},
		SelfPauses: map[string]Stop{"tag:ci": {Active: true, Since: oct}}}
	for range 20 {
		sl.add(Record{Event: "exec.decision", Decision: "refuse"})
	}
	sl.check("cp", "cp-pause", "tag:ci")
	files, _ := logFiles(sl.dir)
	if len(files) < 3 {
		t.Fatalf("%d files: the log did not rotate", len(files))
	}
	st, err := LastStops(sl.dir)
	if err != nil || !st.SelfPauses["tag:ci"].Since.Equal(oct) || st.SelfPauses["tag:ci"].ID == "" || st.Pause.ID == "" {
		t.Fatalf("checkpoint read back: %+v %v", st, err)
	}
}

// Checkpoints that do not read (cut to the record's caps, written by an
// older server, edited) never make the state more open: each part they
// cannot tell is what the records before them said.
func TestLastStopsHostileCheckpoints(t *testing.T) {
	good := Stops{}.CheckpointDetails()
	for _, tc := range []struct {
		name   string
		edit   func(map[string]string)
		lock   string // lockout by after the checkpoint
		self   string // self-paused principals after it
		paused string
	}{
		{"as written", func(map[string]string) {}, "", "", ""},
		{"no parts (the state file was unreadable)", func(d map[string]string) { clear(d); d["state_error"] = "x" }, "tag:owner", "tag:agent", "tag:owner"},
		{"lockout neither active nor inactive", func(d map[string]string) { d["lockout"] = "off" }, "tag:owner", "", ""},
		{"lockout empty", func(d map[string]string) { d["lockout"] = "" }, "tag:owner", "", ""},
		{"pause in capitals", func(d map[string]string) { d["pause"] = "INACTIVE" }, "", "", "tag:owner"},
		{"self-pauses cut to the caps", func(d map[string]string) {
			d["self_pauses"] = `{"tag:x":"2026-10-14T12:00:00Z","ta… (2000 bytes, sha256 00)`
		}, "", "tag:agent", ""},
		{"self-pauses null", func(d map[string]string) { d["self_pauses"] = "null" }, "", "tag:agent", ""},
		{"self-pauses a list", func(d map[string]string) { d["self_pauses"] = `["tag:x"]` }, "", "tag:agent", ""},
		{"self-pauses missing (an older server's)", func(d map[string]string) { delete(d, "self_pauses") }, "", "tag:agent", ""},
		{"self-pause of nobody", func(d map[string]string) { d["self_pauses"] = `{"":"2026-10-14T12:00:00Z"}` }, "", "tag:agent", ""},
		{"self-pause with no time", func(d map[string]string) { d["self_pauses"] = `{"tag:x":"soon"}` }, "", "tag:agent", ""},
		{"self-pauses empty", func(d map[string]string) { d["self_pauses"] = `{}` }, "", "", ""},
		{"self-pause other", func(d map[string]string) { d["self_pauses"] = `{"tag:x":"2026-10-14T12:00:00Z"}` }, "", "tag:x", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sl := newStopLog(t, 1<<20)
			sl.add(Record{Event: EventLockout, Decision: "allow", Principal: "tag:owner"})
			sl.add(Record{Event: EventPause, Decision: "allow", Principal: "tag:owner"})
			sl.add(Record{Event: EventPause, Decision: "allow", Principal: "tag:agent", Details: map[string]string{"scope": "self"}})
			details := maps.Clone(good)
			tc.edit(details)
			sl.l.SetCheckpoint(func() map[string]string { return details })
			sl.clock.Set(oct.AddDate(0, 1, 0)) // a new month: a new file, with a checkpoint
			sl.add(Record{Event: "exec.decision", Decision: "refuse"})
			sl.check(tc.lock, tc.paused, splitNonEmpty(tc.self)...)
		})
	}
}

func splitNonEmpty(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

// FuzzLastStops writes a checkpoint with arbitrary details after records
// that lock out, pause and self-pause: LastStops never fails on it, and
// each part the checkpoint does not carry in a form that reads stays as
// the records said (active).
func FuzzLastStops(f *testing.F) {
	for _, d := range []map[string]string{Stops{}.CheckpointDetails(), {"lockout": "active"}, {"self_pauses": "null"}} {
		f.Add(d["lockout"], d["pause"], d["self_pauses"], d["lockout_since"])
	}
	f.Add("inactive", "inactive", `{"tag:x":"2026-10-14T12:00:00Z"}`, "2026-10-14T12:00:00Z")
	f.Add("inactive", "inactive", `{"":"x"}`, "not a time")
	f.Add("inactive", "inactive", strings.Repeat("x", 5000), "")
	f.Fuzz(func(t *testing.T, lockout, pause, self, since string) {
		sl := newStopLog(t, 1<<20)
		sl.add(Record{Event: EventLockout, Decision: "allow", Principal: "tag:owner"})
		sl.add(Record{Event: EventPause, Decision: "allow", Principal: "tag:owner"})
		sl.add(Record{Event: EventPause, Decision: "allow", Principal: "tag:agent", Details: map[string]string{"scope": "self"}})
		details := map[string]string{"lockout": lockout, "pause": pause, "self_pauses": self, "lockout_since": since}
		sl.l.SetCheckpoint(func() map[string]string { return details })
		sl.clock.Set(oct.AddDate(0, 1, 0))
		cp, err := sl.l.Append(context.Background(), Record{Event: "exec.decision"})
		if err != nil {
			t.Fatal(err)
		}
		recs, err := Tail(sl.dir, 2)
		if err != nil || recs[0].Event != EventCheckpoint || recs[1].ID != cp.ID {
			t.Fatalf("no checkpoint before %s: %v", cp.ID, err)
		}
		st, err := LastStops(sl.dir)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := checkpointStop(recs[0], CheckpointLockout); !ok && !st.Lockout.Active {
			t.Fatalf("lockout %q lifted the lockout", lockout)
		}
		if _, ok := checkpointStop(recs[0], CheckpointPause); !ok && !st.Pause.Active {
			t.Fatalf("pause %q lifted the pause", pause)
		}
		if _, ok := checkpointSelfPauses(recs[0]); !ok && !st.SelfPauses["tag:agent"].Active {
			t.Fatalf("self-pauses %q lifted tag:agent's", self)
		}
		for who, p := range st.SelfPauses {
			if who == "" || !p.Active {
				t.Fatalf("self-pauses read as %+v", st.SelfPauses)
			}
		}
	})
}

// A lockout or pause recorded as not persisted (a host cut off from the
// shared state) is Unsaved until a record of it says it was written.
func TestLastStopsUnsaved(t *testing.T) {
	sl := newStopLog(t, 1<<20)
	unsaved := func(event string) Record {
		return Record{Event: event, Decision: "allow", Principal: "tag:owner", Code: "state-unavailable",
			Details: map[string]string{"error": "etcd out of reach"}}
	}
	want := func(lockout, pause bool) {
		t.Helper()
		st, err := LastStops(sl.dir)
		if err != nil || st.Lockout.Unsaved != lockout || st.Pause.Unsaved != pause {
			t.Fatalf("lockout unsaved %v, pause unsaved %v (%v), want %v %v", st.Lockout.Unsaved, st.Pause.Unsaved, err, lockout, pause)
		}
	}
	sl.add(Record{Event: EventLockout, Decision: "allow", Principal: "tag:owner"})
	want(false, false)
	sl.add(unsaved(EventLockout)) // pressed again while cut off: in force here only
	sl.add(unsaved(EventPause))
	want(true, true)
	sl.add(Record{Event: EventLockout, Decision: "allow", Principal: "tag:owner"})
	sl.add(Record{Event: EventPause, Decision: "allow", Principal: "tag:owner"})
	want(false, false)
}
