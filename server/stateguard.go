package server

import (
	"context"
	"fmt"
	"time"

	"coily.dev/coily/audit"
	"coily.dev/coily/refusal"
	"coily.dev/coily/store"
)

// EventStateRestore is the audit record of a lockout the server put back
// at start because its state file had lost it.
const EventStateRestore = "state.restore"

// crossCheckLockout makes sure the server does not come up more open than
// it went down. The state file's lockout is checked against the last
// lockout or unlock the audit log records, and against the log's mere
// existence:
//   - the state file was missing or empty (store.DB.Created) while the log
//     holds records: the state was lost (a deleted, zeroed or replaced
//     file), so the server starts locked out;
//   - the log's last word is a lockout the state file does not have: the
//     lockout is restored from the log;
//   - a lockout in the state file stands whatever the log says (the more
//     restrictive wins).
//
// A restored lockout is persisted and audited (state.restore).
func (s *Server) crossCheckLockout() error {
	if s.stops.Lockout.Active {
		return nil
	}
	records := s.cfg.Audit.Records()
	logged, err := audit.LastLockout(s.cfg.Audit.Dir())
	if err != nil {
		return fmt.Errorf("server: read the lockout state from the audit log: %w", err)
	}
	var st store.Stop
	switch {
	case logged.Active:
		st = store.Stop{Active: true, By: logged.By, Reason: logged.Reason, Since: logged.Since}
		if st.Since.IsZero() {
			st.Since = s.cfg.Now()
		}
		st.Reason = fmt.Sprintf("%s [restored at start from audit record %s: %s said unlocked]", st.Reason, logged.ID, s.cfg.Store.Path())
	case s.cfg.Store.Created() && records > 0:
		st = store.Stop{Active: true, By: serverCaller.Principal, Since: s.cfg.Now(), Reason: fmt.Sprintf(
			"%s was missing or empty while the audit log holds %d records: the state was lost, so coily started locked out; "+
				"check what happened (coily state check, coily audit tail), then unlock", s.cfg.Store.Path(), records)}
	default:
		return nil
	}
	s.log.Error("starting locked out: the state file had lost the lockout", "reason", st.Reason)
	s.stops.Lockout = st
	rec := callerRecord(serverCaller, "", EventStateRestore, st.Reason)
	rec.Decision, rec.Details = "allow", map[string]string{"state_file": s.cfg.Store.Path()}
	if logged.ID != "" {
		rec.Details["from_record"] = logged.ID
	}
	if err := s.cfg.Store.SetLockout(st); err != nil {
		rec.Code, rec.Details["error"] = string(refusal.Internal), err.Error()
	}
	if _, err := s.record(context.Background(), rec); err != nil {
		return fmt.Errorf("server: audit the restored lockout: %w", err)
	}
	return nil
}

// checkpoint is what opens every new audit file: the stop state as the
// state file holds it (read without the server's lock, which an audit
// write may be made under).
func (s *Server) checkpoint() map[string]string {
	st, err := s.cfg.Store.Stops()
	if err != nil {
		return map[string]string{"state_error": err.Error()}
	}
	out := map[string]string{"lockout": "inactive", "pause": "inactive"}
	if st.Lockout.Active {
		out["lockout"] = "active"
	}
	if st.Pause.Active {
		out["pause"] = "active"
	}
	out["lockout_by"], out["lockout_reason"] = st.Lockout.By, st.Lockout.Reason
	if !st.Lockout.Since.IsZero() {
		out["lockout_since"] = st.Lockout.Since.UTC().Format(time.RFC3339Nano)
	}
	return out
}
