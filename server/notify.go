package server

import (
	"coily.dev/coily/approvals"
	"coily.dev/coily/audit"
	"coily.dev/coily/notify"
	"coily.dev/coily/policy"
	"coily.dev/coily/recorder"
)

// Notifier hears the events the owner may want pushed to a phone or a
// webhook (package notify's Dispatcher). Neither method may block: both
// are called on the Exec pipeline's path and on control calls.
type Notifier interface {
	// Configure hands over the notify block of the policy in force (nil:
	// none), at start and after each reload.
	Configure(*policy.Notify)
	// Notify reports an event.
	Notify(notify.Event)
}

// notify reports ev to the notifier, if there is one.
func (s *Server) notify(ev notify.Event) {
	if s.cfg.Notifier == nil {
		return
	}
	ev.Time = s.cfg.Now()
	s.cfg.Notifier.Notify(ev)
}

// configureNotifier hands the notifier the notify block of p.
func (s *Server) configureNotifier(p *policy.Policy) {
	if s.cfg.Notifier != nil {
		s.cfg.Notifier.Configure(p.Notify())
	}
}

// notifyApproval reports an approval waiting for a human: an Exec's, or
// a push's through the git proxy (its argv names each ref update).
func (s *Server) notifyApproval(ap *approvals.Ticket) {
	a := ap.Snapshot()
	s.notify(notify.Event{Kind: notify.KindApproval, Approval: &notify.Approval{ID: a.GetId(), Rule: a.GetRule(),
		Requester: a.GetRequester(), Argv: a.GetArgv(), Created: a.GetCreatedAt().AsTime(), Expires: a.GetExpiresAt().AsTime()}})
}

// notifyRefusal reports a refusal (the notifier counts them per caller).
func (s *Server) notifyRefusal(r audit.Record) {
	s.notify(notify.Event{Kind: notify.KindRefusal, Refusal: &notify.Refusal{Caller: recorder.CallerKey(r), Code: r.Code}})
}
