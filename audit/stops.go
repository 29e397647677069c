package audit

import (
	"encoding/json"
	"maps"
	"path/filepath"
	"time"

	"coily.dev/coily/refusal"
)

// Events of the stop controls, as the server records them.
const (
	EventLockout = "lockout"
	EventUnlock  = "unlock"
	EventPause   = "pause"
	EventResume  = "resume"
	// EventLockoutRemote is a host's record of a lockout another host
	// took, come in force here through the shared state: its details
	// carry the revision it was read at ("etcd_rev").
	EventLockoutRemote = "lockout.remote"
	// EventUnlockRemote is a host's record of a lockout another host
	// lifted, lifted here through the shared state: LastStops reads it as
	// an unlock. Its details carry the revision it was read at
	// ("etcd_rev") and the unlock's time ("since").
	EventUnlockRemote = "unlock.remote"
	// EventResumeRemote is a host's record of pauses another host lifted,
	// lifted here through the shared state: its details carry the pause
	// state after it as a checkpoint does ("pause", "self_pauses"), which
	// LastStops reads, and the revision ("etcd_rev").
	EventResumeRemote = "resume.remote"
	// EventStateRestore is the server's record of the stops it put back
	// (or imposed) at start, when the state file and the log disagreed:
	// its details carry the parts it set, as a checkpoint does ("lockout":
	// "active", "pause": "active", "self_pauses").
	EventStateRestore = "state.restore"
	// EventStateRebuild is `coily state rebuild`'s record: a new state
	// file, locked out.
	EventStateRebuild = "state.rebuild"
)

// Details of a checkpoint record carrying the stop state (the server's
// Config.Checkpoint, Stops.CheckpointDetails): "lockout" and "pause" are
// "active" or "inactive", with "<name>_by", "<name>_reason" and
// "<name>_since" (RFC 3339); "self_pauses" is a JSON object of the time
// each self-pause began, by principal.
const (
	CheckpointLockout    = "lockout"
	CheckpointPause      = "pause"
	CheckpointSelfPauses = "self_pauses"
)

// Stop is one stop control as the audit log tells it.
type Stop struct {
	// Known is false when the log says nothing about it.
	Known  bool
	Active bool
	By     string
	Reason string
	Since  time.Time
	// ID is the record that last set it.
	ID string
	// Unsaved is true when an allowed lockout or pause record that holds
	// it in force says it could not be persisted (its code is set): a
	// stop taken while the state was out of reach (a host cut off from
	// etcd), which no other host saw, so no loosening elsewhere lifted it.
	Unsaved bool
}

// Stops is the stop state as the audit log tells it.
type Stops struct {
	Lockout Stop
	Pause   Stop
	// SelfPauses are the principals' pauses of themselves, by principal:
	// only those the log says are active.
	SelfPauses map[string]Stop
}

// LastStops reads the stop state the log records last, record by record:
//   - a lockout (allowed, even if the server could not persist it) makes
//     the lockout active; an allowed unlock inactive, unless an unlock
//     refused as internal follows it (its persisting failed, so the
//     lockout stood); an unlock.remote (another host's unlock, learnt
//     through the shared state) inactive;
//   - a resume.remote sets the server's pause and the self-pauses as its
//     details carry them, as a checkpoint does;
//   - an allowed pause pauses the server, or with details "scope": "self"
//     its principal only; an allowed resume lifts the server's pause and
//     every self-pause, unless a resume refused as internal follows it
//     (then the pauses it would have lifted stand);
//   - a checkpoint record sets each part it carries (CheckpointLockout,
//     CheckpointPause, CheckpointSelfPauses);
//   - a state.restore record sets active the parts it names (one that
//     names none is a lockout, as every such record before they were
//     named was); a state.rebuild record is a lockout.
//
// It reads from the newest file that begins with a checkpoint carrying
// every part, or from the first file when none does.
func LastStops(dir string) (Stops, error) {
	files, err := logFiles(dir)
	if err != nil {
		return Stops{}, err
	}
	from := 0
	for i := len(files) - 1; i >= 0; i-- {
		first, ok, err := firstRecord(filepath.Join(dir, files[i].name))
		if err != nil {
			return Stops{}, err
		}
		if ok && first.Event == EventCheckpoint && checkpointComplete(first) {
			from = i
			break
		}
	}
	var r stopReader
	for _, lf := range files[from:] {
		if err := eachRecord(filepath.Join(dir, lf.name), r.read); err != nil {
			return r.st, err
		}
	}
	return r.st, nil
}

// stopReader folds records into Stops.
type stopReader struct {
	st Stops
	// beforeResume is the pause state an allowed resume lifted, until the
	// next pause record: a resume refused as internal puts it back.
	beforeResume *Stops
}

func (sr *stopReader) read(r Record) error {
	st := &sr.st
	switch {
	case r.Event == EventCheckpoint:
		sr.checkpoint(r)
	case r.Event == EventStateRestore && r.Decision == "allow":
		sr.restore(r)
	case r.Event == EventStateRebuild && r.Decision == "allow" && !st.Lockout.Active:
		st.Lockout = Stop{Known: true, Active: true, By: r.Principal, Reason: r.Reason, Since: r.Time, ID: r.ID}
	case r.Event == EventLockout && r.Decision == "allow":
		if !st.Lockout.Active {
			st.Lockout = Stop{Known: true, Active: true, By: r.Principal, Reason: r.Reason, Since: r.Time, ID: r.ID}
		}
		st.Lockout.Unsaved = r.Code != ""
	case r.Event == EventUnlock && r.Decision == "allow":
		st.Lockout = Stop{Known: true, Active: false, By: r.Principal, Reason: r.Reason, Since: r.Time, ID: r.ID}
	case r.Event == EventUnlockRemote && r.Decision == "allow":
		st.Lockout = Stop{Known: true, Active: false, By: r.Details["by"], Reason: r.Reason, Since: r.Time, ID: r.ID}
	case r.Event == EventResumeRemote && r.Decision == "allow":
		// The pause state after another host's resume, carried as a
		// checkpoint carries it (no lockout part).
		sr.checkpoint(r)
	case r.Event == EventUnlock && r.Decision == "refuse" && r.Code == string(refusal.Internal) && !st.Lockout.Active && st.Lockout.Known:
		// The unlock was recorded, then could not be persisted.
		st.Lockout = Stop{Known: true, Active: true, By: r.Principal, Reason: "unlock could not be persisted", Since: r.Time, ID: r.ID}
	case r.Event == EventPause && r.Decision == "allow":
		sr.beforeResume = nil
		sr.pause(r)
	case r.Event == EventResume && r.Decision == "allow":
		sr.beforeResume = &Stops{Pause: st.Pause, SelfPauses: st.SelfPauses}
		st.Pause = Stop{Known: true, Active: false, By: r.Principal, Reason: r.Reason, Since: r.Time, ID: r.ID}
		st.SelfPauses = nil
	case r.Event == EventResume && r.Decision == "refuse" && r.Code == string(refusal.Internal) && sr.beforeResume != nil:
		// The resume was recorded, then could not be persisted.
		st.Pause, st.SelfPauses = sr.beforeResume.Pause, sr.beforeResume.SelfPauses
		sr.beforeResume = nil
	}
	return nil
}

// pause reads an allowed pause: the first pause's record stands.
func (sr *stopReader) pause(r Record) {
	p := Stop{Known: true, Active: true, By: r.Principal, Reason: r.Reason, Since: r.Time, ID: r.ID}
	if r.Details["scope"] != "self" {
		if !sr.st.Pause.Active {
			sr.st.Pause = p
		}
		sr.st.Pause.Unsaved = r.Code != ""
		return
	}
	if _, ok := sr.st.SelfPauses[r.Principal]; ok {
		return
	}
	self := maps.Clone(sr.st.SelfPauses)
	if self == nil {
		self = map[string]Stop{}
	}
	self[r.Principal] = p
	sr.st.SelfPauses = self
}

// restore reads a state.restore record: in force whether or not the
// server could persist it.
func (sr *stopReader) restore(r Record) {
	st := Stop{Known: true, Active: true, By: r.Principal, Reason: r.Reason, Since: r.Time, ID: r.ID}
	self, hasSelf := checkpointSelfPauses(r)
	named := r.Details[CheckpointLockout] == "active" || r.Details[CheckpointPause] == "active" || hasSelf
	if (r.Details[CheckpointLockout] == "active" || !named) && !sr.st.Lockout.Active {
		sr.st.Lockout = st
	}
	if r.Details[CheckpointPause] == "active" && !sr.st.Pause.Active {
		sr.st.Pause = st
	}
	for who, p := range self {
		if _, ok := sr.st.SelfPauses[who]; !ok {
			sr.pause(Record{ID: r.ID, Time: p.Since, Principal: who, Reason: r.Reason, Details: map[string]string{"scope": "self"}})
		}
	}
}

// checkpoint sets the parts a checkpoint record carries; a part it
// carries in a form that does not read (a value cut to the record's caps)
// leaves that part as the records before it said.
func (sr *stopReader) checkpoint(r Record) {
	if l, ok := checkpointStop(r, CheckpointLockout); ok {
		sr.st.Lockout = l
	}
	if p, ok := checkpointStop(r, CheckpointPause); ok {
		sr.st.Pause = p
		sr.beforeResume = nil
	}
	if self, ok := checkpointSelfPauses(r); ok {
		sr.st.SelfPauses = self
		sr.beforeResume = nil
	}
}

// checkpointComplete reports whether a checkpoint carries every part in a
// form that reads: reading may begin there.
func checkpointComplete(r Record) bool {
	_, lok := checkpointStop(r, CheckpointLockout)
	_, pok := checkpointStop(r, CheckpointPause)
	_, sok := checkpointSelfPauses(r)
	return lok && pok && sok
}

func checkpointStop(r Record, name string) (Stop, bool) {
	state := r.Details[name]
	if state != "active" && state != "inactive" {
		return Stop{}, false
	}
	st := Stop{Known: true, Active: state == "active", By: r.Details[name+"_by"], Reason: r.Details[name+"_reason"], ID: r.ID}
	st.Since, _ = time.Parse(time.RFC3339Nano, r.Details[name+"_since"])
	return st, true
}

func checkpointSelfPauses(r Record) (map[string]Stop, bool) {
	text, ok := r.Details[CheckpointSelfPauses]
	if !ok {
		return nil, false
	}
	var in map[string]time.Time
	if err := json.Unmarshal([]byte(text), &in); err != nil || in == nil {
		return nil, false
	}
	var out map[string]Stop
	for who, since := range in {
		if who == "" {
			return nil, false
		}
		if out == nil {
			out = map[string]Stop{}
		}
		out[who] = Stop{Known: true, Active: true, By: who, Reason: "paused itself (checkpoint " + r.ID + ")", Since: since, ID: r.ID}
	}
	return out, true
}

// CheckpointDetails are the details of a checkpoint record carrying s:
// what LastStops reads back. The self-pauses are a JSON object of the
// time each began by principal (kept short: a value longer than the
// record's caps allow is cut, and a checkpoint that does not read is
// read past).
func (s Stops) CheckpointDetails() map[string]string {
	out := map[string]string{}
	for name, st := range map[string]Stop{CheckpointLockout: s.Lockout, CheckpointPause: s.Pause} {
		out[name] = "inactive"
		if st.Active {
			out[name] = "active"
		}
		out[name+"_by"], out[name+"_reason"] = st.By, st.Reason
		if !st.Since.IsZero() {
			out[name+"_since"] = st.Since.UTC().Format(time.RFC3339Nano)
		}
	}
	out[CheckpointSelfPauses] = SelfPausesDetail(s.SelfPauses)
	return out
}

// SelfPausesDetail is the CheckpointSelfPauses detail of the active
// pauses in p.
func SelfPausesDetail(p map[string]Stop) string {
	self := map[string]time.Time{}
	for who, st := range p {
		if st.Active {
			self[who] = st.Since.UTC()
		}
	}
	text, _ := json.Marshal(self) // a map of strings to times always encodes
	return string(text)
}

// firstRecord parses the first line of the file at path.
func firstRecord(path string) (Record, bool, error) {
	var rec Record
	found := false
	err := eachLine(path, func(n int, b []byte) error {
		r, _, err := parseLine(b)
		if err != nil {
			return &BrokenError{File: path, Line: n, Why: err.Error()}
		}
		rec, found = r, true
		return errStop
	})
	return rec, found, err
}
