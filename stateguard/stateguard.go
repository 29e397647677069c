// Package stateguard keeps the server's stop state and its audit log
// honest with each other. At start it cross-checks the state file against
// the log: the server never comes up more open than the log says it was,
// and comes up locked out beside a log that lost records. While it runs
// it records the log's head in the state file (the anchor) after every
// change of the stop state, so that the next start can tell a log cut
// short; and it writes the stop state into every new audit file (the
// checkpoint).
package stateguard

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"coily.dev/coily/access"
	"coily.dev/coily/audit"
	"coily.dev/coily/refusal"
	"coily.dev/coily/stops"
	"coily.dev/coily/store"
)

// Config holds a Guard's collaborators, all required.
type Config struct {
	Audit *audit.Log
	// Local is this host's state: the audit head it anchors and the
	// file it cross-checks (the stop controls are read and restored
	// through Stops).
	Local store.Local
	Stops *stops.Controls
	// Record writes an audit record, fsynced (the server's, which anchors
	// the head after a change of the stop state).
	Record func(context.Context, audit.Record) (audit.Record, error)
	Log    *slog.Logger
	Now    func() time.Time
	// Shared says the stop state is the one several hosts share (etcd):
	// another host may have lifted what this host's log last says is in
	// force (remote.go).
	Shared bool
	// Lost are losses of audit records found at start by others than
	// the state file (a witness holding a checkpoint the log does not
	// extend): CrossCheck starts locked out, naming each.
	Lost []Lost
}

// Lost is what a check found the log lost or changed: the state file's
// checkpoint (CheckKeptCheckpoint), or a witness outside the host
// (Config.Lost).
type Lost struct {
	// Why says what was found and the command that repairs it.
	Why string
	// Details are audited with the state.restore record.
	Details map[string]string
}

// Guard cross-checks the stop state at start and anchors the audit head.
type Guard struct {
	cfg Config
	// mu serialises recording the audit head (anchor.go); anchored is the
	// seq last recorded.
	mu       sync.Mutex
	anchored uint64
}

// New returns a Guard; CrossCheck is its first call.
func New(cfg Config) *Guard { return &Guard{cfg: cfg} }

// CrossCheck makes sure the server does not come up more open than it
// went down, taking for each stop control the more restrictive of what the
// state file and the audit log say:
//   - the log's last word is a lockout, a pause or a principal's pause of
//     itself the state file does not have (an older state file put back,
//     a state written unpersisted): it is restored from the log; with a
//     shared state (Config.Shared), only when the shared state's record
//     of that control is not newer than the log's: one newer is another
//     host's unlock or resume, which this host audits (remote.go);
//   - the state file was missing or empty (store.Local.Created) while the log
//     holds records: the state was lost, so the server starts locked out;
//   - the log no longer holds the head the state file recorded
//     (audit.CheckHead): records were cut off its end or rewritten, so the
//     server starts locked out, naming both;
//   - another found records lost (Config.Lost: a witness): the server
//     starts locked out, naming it.
//
// What it restores is persisted, logged and audited in one state.restore
// record that says what disagreed. The head is recorded afresh at start
// (anchor), but after a log found short only once its lockout is
// persisted: until then every start finds it again.
func (s *Guard) CrossCheck() error {
	dir := s.cfg.Audit.Dir()
	logged, err := audit.LastStops(dir)
	if err != nil {
		return fmt.Errorf("server: read the stop state from the audit log: %w", err)
	}
	head, err := s.cfg.Local.AuditHead()
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("server: %w", err)
	}
	s.anchored = head.Seq // never recorded further back in this run, but below
	state, _ := s.cfg.Stops.State()
	r := restoring{s: s, stops: state, details: map[string]string{"state_file": s.cfg.Local.Path()}}
	if s.cfg.Shared {
		if logged, err = s.liftedElsewhere(logged, state); err != nil {
			return err
		}
	}
	r.fromLog(logged)
	if s.cfg.Local.Created() && s.cfg.Audit.Records() > 0 && !r.stops.Lockout.Active {
		r.lock(access.ServerCaller.Principal, s.cfg.Now(), fmt.Sprintf(
			"%s was missing or empty while the audit log holds %d records: the state was lost, so coily started locked out; "+
				"check what happened (coily state check, coily audit tail), then unlock", s.cfg.Local.Path(), s.cfg.Audit.Records()))
		r.found = append(r.found, "state file missing or empty")
	}
	short, err := r.checkHead(dir, head)
	if err != nil {
		return err
	}
	cut, err := r.checkCheckpoint(dir)
	if err != nil {
		return err
	}
	short = short || cut
	for _, l := range s.cfg.Lost {
		r.lock(access.ServerCaller.Principal, s.cfg.Now(), l.Why)
		r.found = append(r.found, l.Why)
		maps.Copy(r.details, l.Details)
		short = true
	}
	if len(r.found) == 0 {
		return nil
	}
	persisted, err := r.apply()
	if err != nil {
		return err
	}
	switch {
	case short && persisted:
		s.anchored = 0 // the log as it is now, from here on
	case short:
		// The lockout is in force but not in the state file: the head
		// stays as recorded, so that the next start finds it again.
		s.anchored = math.MaxUint64
	}
	return nil
}

// restoring is the stop state CrossCheck arrives at.
type restoring struct {
	s       *Guard
	stops   store.Stops
	lockout bool // the lockout changed
	pauses  bool // the pause or a self-pause changed
	found   []string
	details map[string]string
}

// fromLog takes each stop the log has active and the state file has not.
func (r *restoring) fromLog(logged audit.Stops) {
	file := r.s.cfg.Local.Path()
	if l := logged.Lockout; l.Active && !r.stops.Lockout.Active {
		r.lock(l.By, l.Since, fmt.Sprintf("%s [restored at start from audit record %s: %s said unlocked]", l.Reason, l.ID, file))
		r.found = append(r.found, fmt.Sprintf("lockout: audit record %s says locked out, the state file unlocked", l.ID))
		r.details["from_record"] = l.ID
	}
	if p := logged.Pause; p.Active && !r.stops.Pause.Active {
		r.stops.Pause = r.stop(p.By, p.Since, fmt.Sprintf("%s [restored at start from audit record %s: %s said not paused]", p.Reason, p.ID, file))
		r.pauses = true
		r.found = append(r.found, fmt.Sprintf("pause: audit record %s says paused, the state file not", p.ID))
		r.details[audit.CheckpointPause], r.details["pause_from_record"] = "active", p.ID
	}
	restored := map[string]audit.Stop{}
	for _, who := range slices.Sorted(maps.Keys(logged.SelfPauses)) {
		p := logged.SelfPauses[who]
		if old, ok := r.stops.SelfPauses[who]; ok && old.Active {
			continue
		}
		self := maps.Clone(r.stops.SelfPauses)
		if self == nil {
			self = map[string]store.Stop{}
		}
		self[who] = r.stop(who, p.Since, fmt.Sprintf("paused itself [restored at start from audit record %s: %s said not paused]", p.ID, file))
		r.stops.SelfPauses, r.pauses = self, true
		restored[who] = audit.Stop{Active: true, Since: self[who].Since}
		r.found = append(r.found, fmt.Sprintf("%s's pause of itself: audit record %s says paused, the state file not", who, p.ID))
	}
	if len(restored) > 0 {
		r.details[audit.CheckpointSelfPauses] = audit.SelfPausesDetail(restored)
	}
}

// checkHead locks out when the log no longer holds the recorded head.
func (r *restoring) checkHead(dir string, h store.AuditHead) (short bool, err error) {
	err = audit.CheckHead(dir, audit.Head{Seq: h.Seq, Hash: h.Hash})
	var herr *audit.HeadError
	if !errors.As(err, &herr) {
		if err != nil {
			return false, fmt.Errorf("server: check the audit log against the head %s recorded: %w", r.s.cfg.Local.Path(), err)
		}
		return false, nil
	}
	why := fmt.Sprintf("%s (recorded in %s at %s)", strings.TrimPrefix(herr.Error(), "audit: "), r.s.cfg.Local.Path(),
		h.At.UTC().Format("2006-01-02T15:04:05Z"))
	r.LostRecords(why, map[string]string{
		"audit_head_recorded": fmt.Sprintf("%d %s", h.Seq, h.Hash),
		"audit_head_found":    fmt.Sprintf("%d %s", herr.Last.Seq, herr.Last.Hash),
	})
	return true, nil
}

// LostRecords is the path of every check that proves the log lost or
// changed records (the head, the checkpoint, a witness's): the server
// starts locked out, why (what disagrees: sizes, roots, which check) in
// the lockout's reason and the state.restore record with details, and
// the repair in the reason.
func (r *restoring) LostRecords(why string, details map[string]string) {
	r.found = append(r.found, why)
	maps.Copy(r.details, details)
	r.lock(access.ServerCaller.Principal, r.s.cfg.Now(), why+": coily started locked out. Find out what removed or changed them "+
		"(coily audit verify --checkpoint, coily audit tail, a copy of the log kept elsewhere; docs/operations.md, "+
		"\"The audit log lost records\"), then unlock (coily unlock)")
}

// lock locks out, or adds why to the reason of the lockout in force (the
// state file's keeps its by and since).
func (r *restoring) lock(by string, since time.Time, why string) {
	r.details[audit.CheckpointLockout] = "active"
	switch {
	case r.lockout:
		r.stops.Lockout.Reason += "; " + why
	case r.stops.Lockout.Active:
		r.stops.Lockout.Reason += " [at start: " + why + "]"
	default:
		r.stops.Lockout = r.stop(by, since, why)
	}
	r.lockout = true
}

func (r *restoring) stop(by string, since time.Time, reason string) store.Stop {
	if since.IsZero() {
		since = r.s.cfg.Now()
	}
	return store.Stop{Active: true, By: by, Reason: reason, Since: since}
}

// apply puts the state in force, persists what changed, and logs and
// audits what disagreed. persisted is false when a write failed (the
// state is in force in memory all the same).
func (r *restoring) apply() (persisted bool, err error) {
	s := r.s
	perr := s.cfg.Stops.Restore(r.stops, r.lockout, r.pauses)
	reason := strings.Join(r.found, "; ")
	s.cfg.Log.Error("starting more restricted than the state file: it disagrees with the audit log", "found", reason,
		"locked_out", r.stops.Lockout.Active)
	rec := access.CallerRecord(access.ServerCaller, "", audit.EventStateRestore, reason)
	rec.Decision, rec.Details = "allow", r.details
	if perr != nil {
		rec.Code, rec.Details["error"] = string(refusal.Internal), perr.Error()
	}
	if _, err := s.cfg.Record(context.Background(), rec); err != nil {
		return false, fmt.Errorf("server: audit the restored stop state: %w", err)
	}
	return perr == nil, nil
}

// Checkpoint is what opens every new audit file (audit.Log.SetCheckpoint):
// the stop state as the state file holds it (read without the stop
// controls' lock, which an audit write may be made under).
func (s *Guard) Checkpoint() map[string]string {
	st, err := s.cfg.Stops.Persisted()
	if err != nil {
		return map[string]string{"state_error": err.Error()}
	}
	self := map[string]audit.Stop{}
	for who, p := range st.SelfPauses {
		self[who] = auditStop(p)
	}
	return audit.Stops{Lockout: auditStop(st.Lockout), Pause: auditStop(st.Pause), SelfPauses: self}.CheckpointDetails()
}

func auditStop(s store.Stop) audit.Stop {
	return audit.Stop{Active: s.Active, By: s.By, Reason: s.Reason, Since: s.Since}
}
