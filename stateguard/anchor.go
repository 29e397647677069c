package stateguard

import (
	"coily.dev/coily/audit"
	"coily.dev/coily/refusal"
	"coily.dev/coily/store"
)

// The state file records the audit chain's head (store.AuditHead), so that
// a start finds a log that lost records off its end (CrossCheck).
// It is written after every change of the stop state is recorded, when an
// audit file is closed at rotation, at clean shutdown (audit.Log's anchor,
// which both call) and at start: never per record, since a bbolt commit
// costs an fsync like the audit line's own, and the Exec path would pay
// it twice. A log cut back past the last of these is found at the next
// start; one cut after it (within a run, or after a crash) is not.

// AnchorsHead reports whether the state file records the audit head after
// r: a change of the stop state (or one that could not be persisted).
func AnchorsHead(r audit.Record) bool {
	switch r.Event {
	case audit.EventLockout, audit.EventUnlock, audit.EventPause, audit.EventResume, audit.EventStateRestore:
		return r.Decision == "allow" || r.Code == string(refusal.Internal)
	}
	return false
}

// Anchor records the audit log's durable head in the state file.
func (s *Guard) Anchor() { s.AnchorHead(s.cfg.Audit.Head()) }

// AnchorHead records h in the state file unless a later head is recorded
// already (records of one run only move it forward; the heads of
// concurrent calls may arrive out of order). A failure is logged: the
// stop state it follows stands either way.
func (s *Guard) AnchorHead(h audit.Head) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if h.Seq <= s.anchored {
		return
	}
	if err := s.cfg.Local.SetAuditHead(store.AuditHead{Seq: h.Seq, Hash: h.Hash, At: s.cfg.Now()}); err != nil {
		s.cfg.Log.Error("recording the audit log's head in the state file", "seq", h.Seq, "err", err)
		return
	}
	s.anchored = h.Seq
}
