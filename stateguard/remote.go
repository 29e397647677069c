package stateguard

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"coily.dev/coily/access"
	"coily.dev/coily/audit"
	"coily.dev/coily/store"
)

// With a shared state (etcd), the stop controls are every host's: host A
// locks out, host B unlocks, and A's own log, which never heard of the
// unlock while A was down, still says locked out. Were A to restore the
// lockout from its log at its next start, it would lock every host again.
// So a stop the log has in force is restored only when the shared state's
// record of that control (its Since: the time of its last change, by
// whom) is not newer than the log's; a newer one is a loosening taken
// elsewhere after it, which this host audits as unlock.remote or
// resume.remote, so that its log tells the truth from then on (the
// records fleet.Lockouts writes while the host runs, as it learns them).
//
// An older shared state (an etcd snapshot put back, a loosening that never
// happened) is still caught: its records are older than the log's. Clocks
// of different hosts are compared: a host whose clock runs behind by more
// than the time between a lockout and its unlock elsewhere puts the
// lockout back (fail closed).

// liftedElsewhere is logged without the stops the shared state st lifted
// after the log's record of them; each such loosening is audited.
func (s *Guard) liftedElsewhere(logged audit.Stops, st store.Stops) (audit.Stops, error) {
	ctx := context.Background()
	// A stop the log says was never persisted was taken while this host
	// was cut off: no other host saw it, so no unlock elsewhere, however
	// new, lifted it. It is restored (and written) as on one host.
	if l := logged.Lockout; l.Active && !l.Unsaved && !st.Lockout.Active && st.Lockout.Since.After(l.Since) {
		rec := UnlockRemote(st.Lockout, 0)
		rec.Details["from"], rec.Details["over_record"] = "start", l.ID
		if _, err := s.cfg.Record(ctx, rec); err != nil {
			return logged, fmt.Errorf("server: audit an unlock taken elsewhere: %w", err)
		}
		logged.Lockout = audit.Stop{Known: true, By: st.Lockout.By, Reason: st.Lockout.Reason, Since: st.Lockout.Since}
	}
	lifted := []string{}
	if p := logged.Pause; p.Active && !p.Unsaved && !st.Pause.Active && st.Pause.Since.After(p.Since) {
		logged.Pause = audit.Stop{Known: true, By: st.Pause.By, Reason: st.Pause.Reason, Since: st.Pause.Since}
		lifted = append(lifted, "the pause")
	}
	for _, who := range slices.Sorted(maps.Keys(logged.SelfPauses)) {
		p := logged.SelfPauses[who]
		// A resume deletes the pauses of themselves: its record is the
		// server's pause's.
		at := st.Pause.Since
		cur, ok := st.SelfPauses[who]
		switch {
		case ok && cur.Active:
			continue
		case ok:
			at = cur.Since
		case st.Pause.Active:
			// The shared pause is a pause, not the resume that deleted
			// the pauses of themselves: nothing says one did.
			continue
		}
		if at.After(p.Since) {
			logged.SelfPauses = maps.Clone(logged.SelfPauses)
			delete(logged.SelfPauses, who)
			lifted = append(lifted, who+"'s pause of itself")
		}
	}
	if len(lifted) == 0 {
		return logged, nil
	}
	rec := ResumeRemote(st, 0)
	rec.Reason = fmt.Sprintf("lifted elsewhere while this host was down: %v", lifted)
	rec.Details["from"] = "start"
	if _, err := s.cfg.Record(ctx, rec); err != nil {
		return logged, fmt.Errorf("server: audit a resume taken elsewhere: %w", err)
	}
	return logged, nil
}

// UnlockRemote is the unlock.remote record of the unlock st another host
// took, read at revision rev (0: at start).
func UnlockRemote(st store.Stop, rev int64) audit.Record {
	rec := access.CallerRecord(access.ServerCaller, "", audit.EventUnlockRemote, st.Reason)
	rec.Decision = "allow"
	rec.Details = map[string]string{"by": st.By, "since": st.Since.UTC().Format(time.RFC3339Nano)}
	if rev > 0 {
		rec.Details["etcd_rev"] = fmt.Sprint(rev)
	}
	return rec
}

// ResumeRemote is the resume.remote record of the pauses st holds after
// another host lifted some, read at revision rev (0: at start): its
// details carry the pause state as a checkpoint does, which
// audit.LastStops reads.
func ResumeRemote(st store.Stops, rev int64) audit.Record {
	self := map[string]audit.Stop{}
	for who, p := range st.SelfPauses {
		self[who] = auditStop(p)
	}
	cp := audit.Stops{Pause: auditStop(st.Pause), SelfPauses: self}.CheckpointDetails()
	rec := access.CallerRecord(access.ServerCaller, "", audit.EventResumeRemote, st.Pause.Reason)
	rec.Decision = "allow"
	rec.Details = map[string]string{"by": st.Pause.By}
	for _, k := range []string{audit.CheckpointPause, audit.CheckpointPause + "_by", audit.CheckpointPause + "_reason",
		audit.CheckpointPause + "_since", audit.CheckpointSelfPauses} {
		if v, ok := cp[k]; ok {
			rec.Details[k] = v
		}
	}
	if rev > 0 {
		rec.Details["etcd_rev"] = fmt.Sprint(rev)
	}
	return rec
}
