package server

import (
	"context"
	"maps"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"coily.dev/coily/access"
	"coily.dev/coily/audit"
	"coily.dev/coily/refusal"
)

// killEvent is the audit event of one command killed on its own.
const killEvent = "exec.kill"

// killExec stops one admitted Exec for c, by request id: a running
// command's process group and sandbox get SIGTERM, then SIGKILL after the
// kill grace, as in a lockout; one that has not started (waiting for an
// approval or a slot) never starts, and its wait ends. Its caller is
// answered command-killed. The kill is audited, refused or not, with the
// request's principal, argv and rule.
func (s *Server) killExec(ctx context.Context, c access.Caller, method, id, reason string) (bool, error) {
	rec := access.CallerRecord(c, method, killEvent, reason)
	rec.RequestID = id
	err := validateText("reason", reason)
	if err == nil && (id == "" || len(id) > 64) {
		err = refusal.New(refusal.BadRequest, "request id must be 1 to 64 bytes")
	}
	var j *job
	if err == nil {
		s.mu.Lock()
		j = s.jobs[id]
		s.mu.Unlock()
		switch {
		case j == nil:
			err = refusal.New(refusal.BadRequest, "no command with request id %q is in flight", id)
		case j.ended():
			err = refusal.New(refusal.BadRequest, "request %s has already ended", id)
		}
	}
	if err != nil {
		rec.RequestID = "" // the caller's text, refused: not copied
		return false, s.refuseControlRecord(ctx, rec, err)
	}
	info := j.info()
	rec.Argv, rec.Rule = info.Argv, info.Rule
	rec.Details = map[string]string{"requester": info.Principal}
	running := j.signal(syscall.SIGTERM, refusal.CommandKilled)
	if running {
		rec.Killed = 1
		s.escalate([]*job{j}, nil) // SIGKILL after the grace (the first reason stays)
	} else if j.cancel != nil {
		j.cancel(errKilled) // ends a wait for an approval or a slot
	}
	rec.Details["running"] = strconv.FormatBool(running)
	if err := s.recordControl(ctx, rec, "allow", nil); err != nil {
		return running, err
	}
	return running, nil
}

// errKilled is the cause of an execution's context ended by a kill.
var errKilled = refusal.New(refusal.CommandKilled, "killed before it ran")

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

// inFlight lists the Execs admitted and not yet answered, oldest first.
func (s *Server) inFlight() []ExecInfo {
	s.mu.Lock()
	jobs := slices.Collect(maps.Values(s.jobs))
	s.mu.Unlock()
	out := make([]ExecInfo, 0, len(jobs))
	for _, j := range jobs {
		out = append(out, j.info())
	}
	slices.SortFunc(out, func(a, b ExecInfo) int {
		if c := a.Admitted.Compare(b.Admitted); c != 0 {
			return c
		}
		return strings.Compare(a.RequestID, b.RequestID)
	})
	return out
}
