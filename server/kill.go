package server

import (
	"context"
	"strconv"

	"coily.dev/coily/access"
	"coily.dev/coily/audit"
	"coily.dev/coily/refusal"
	"coily.dev/coily/stops"
	"coily.dev/coily/wire"
)

// killEvent is the audit event of one command killed on its own.
const killEvent = "exec.kill"

// killExec stops one admitted Exec for c, by request id: a running
// command's process group and sandbox get SIGTERM, then SIGKILL after the
// kill grace, as in a lockout; one that has not started (waiting for an
// approval or a slot) never starts, and its wait ends; its caller hears
// command-killed. Audited, refused or not, with its principal, argv, rule.
func (s *Server) killExec(ctx context.Context, c access.Caller, method, id, reason string) (bool, error) {
	rec := access.CallerRecord(c, method, killEvent, reason)
	rec.RequestID = id
	err := wire.CheckText("reason", reason)
	if err == nil && (id == "" || len(id) > 64) {
		err = refusal.New(refusal.BadRequest, "request id must be 1 to 64 bytes")
	}
	var info ExecInfo
	var running bool
	if err == nil {
		info, running, err = s.stops.Kill(id)
	}
	if err != nil {
		rec.RequestID = "" // the caller's text, refused: not copied
		return false, s.refuseControlRecord(ctx, rec, err)
	}
	rec.Argv, rec.Rule = info.Argv, info.Rule
	rec.Details = map[string]string{"requester": info.Principal}
	if running {
		rec.Killed = 1
	}
	rec.Details["running"] = strconv.FormatBool(running)
	if err := s.recordControl(ctx, rec, "allow", nil); err != nil {
		return running, err
	}
	return running, nil
}

// refuseControlRecord audits a refused control call described by rec and
// returns the refusal (internal when even that cannot be audited).
func (s *Server) refuseControlRecord(ctx context.Context, rec audit.Record, err error) error {
	r := refusal.As(err)
	rec.Decision, rec.Code, rec.Reason = "refuse", string(r.Code), r.Msg
	out, aerr := s.record(context.WithoutCancel(ctx), rec)
	if aerr != nil {
		return refusal.Wrap(refusal.Internal, aerr, "audit log unavailable")
	}
	return refusal.WithAudit(err, out.ID)
}

// ExecInfo describes one admitted Exec for the web console.
type ExecInfo = stops.ExecInfo

// inFlight lists the Execs admitted and not yet answered, oldest first.
func (s *Server) inFlight() []ExecInfo { return s.stops.InFlight() }
