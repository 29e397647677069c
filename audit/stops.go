package audit

import (
	"path/filepath"
	"time"

	"coily.dev/coily/refusal"
)

// Events of the stop controls, as the server records them.
const (
	EventLockout = "lockout"
	EventUnlock  = "unlock"
)

// LockoutState is the lockout as the audit log tells it.
type LockoutState struct {
	// Known is false when the log says nothing about the lockout.
	Known  bool
	Active bool
	By     string
	Reason string
	Since  time.Time
	// ID is the record that last set it.
	ID string
}

// LastLockout reads the lockout state the log records last: a lockout
// (allowed, even if the server could not persist it) makes it active; an
// allowed unlock inactive, unless an unlock refused as internal follows it
// (its persisting failed, so the lockout stood); a checkpoint record
// (Details "lockout": "active"/"inactive", "lockout_by", "lockout_reason",
// "lockout_since") sets it too. It reads from the newest file that begins
// with a checkpoint, or from the first file when none does.
func LastLockout(dir string) (LockoutState, error) {
	files, err := logFiles(dir)
	if err != nil {
		return LockoutState{}, err
	}
	from := 0
	for i := len(files) - 1; i >= 0; i-- {
		first, ok, err := firstRecord(filepath.Join(dir, files[i].name))
		if err != nil {
			return LockoutState{}, err
		}
		if ok && first.Event == EventCheckpoint && first.Details["lockout"] != "" {
			from = i
			break
		}
	}
	var st LockoutState
	for _, lf := range files[from:] {
		err := eachRecord(filepath.Join(dir, lf.name), func(r Record) error {
			switch {
			case r.Event == EventCheckpoint && r.Details["lockout"] != "":
				st = LockoutState{Known: true, Active: r.Details["lockout"] == "active", By: r.Details["lockout_by"],
					Reason: r.Details["lockout_reason"], ID: r.ID}
				st.Since, _ = time.Parse(time.RFC3339Nano, r.Details["lockout_since"])
			case r.Event == EventLockout && r.Decision == "allow":
				if !st.Active {
					st = LockoutState{Known: true, Active: true, By: r.Principal, Reason: r.Reason, Since: r.Time, ID: r.ID}
				}
			case r.Event == EventUnlock && r.Decision == "allow":
				st = LockoutState{Known: true, Active: false, By: r.Principal, Reason: r.Reason, Since: r.Time, ID: r.ID}
			case r.Event == EventUnlock && r.Decision == "refuse" && r.Code == string(refusal.Internal) && !st.Active && st.Known:
				// The unlock was recorded, then could not be persisted.
				st = LockoutState{Known: true, Active: true, By: r.Principal, Reason: "unlock could not be persisted", Since: r.Time, ID: r.ID}
			}
			return nil
		})
		if err != nil {
			return st, err
		}
	}
	return st, nil
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
