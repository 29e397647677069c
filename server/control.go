package server

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strconv"

	"google.golang.org/protobuf/types/known/timestamppb"

	"coily.dev/coily/access"
	"coily.dev/coily/audit"
	"coily.dev/coily/notify"
	"coily.dev/coily/policy"
	coilyv1 "coily.dev/coily/proto/coily/v1"
	coilyv1grpc "coily.dev/coily/proto/coily/v1/coilyv1grpc"
	"coily.dev/coily/refusal"
	"coily.dev/coily/stops"
	"coily.dev/coily/store"
	"coily.dev/coily/wire"
)

// checkLockout refuses while the server is locked out.
func (s *Server) checkLockout() error { return s.stops.CheckLockout() }

// admitJob checks the stop controls and, if they allow it, registers the
// execution's job under the same lock (stops.Controls.Admit), so that a
// concurrent Lockout either refuses this request or sees (and kills) its
// job.
func (s *Server) admitJob(x *execution, cancel context.CancelCauseFunc) (*stops.Job, error) {
	return s.stops.Admit(x.id, x.caller.Principal, x.req.GetArgv(), cancel)
}

// release forgets an execution's job, frees its concurrency slot (handing
// it to an approved request waiting for one) and stops counting it as
// waiting. It is idempotent: the pipeline calls it on refusal and when
// answered.
func (s *Server) release(x *execution) {
	s.stops.Release(x.job, &x.claim)
	x.job = nil
	if x.exe != nil {
		x.exe.Close()
		x.exe = nil
	}
}

// Lockout implements the nuclear stop: it takes effect in memory first (new
// requests are refused from that instant), signals every running command's
// process group with SIGTERM and SIGKILL after the grace period, then
// persists and audits. A persistence failure leaves the lockout in force in
// memory and is reported to the caller.
func (s *Server) Lockout(ctx context.Context, req *coilyv1.LockoutRequest) (*coilyv1.LockoutResponse, error) {
	c, err := access.CallerFrom(ctx)
	if err != nil {
		return nil, err
	}
	if err := wire.CheckText("reason", req.GetReason()); err != nil {
		return nil, s.refuseControl(ctx, c, "lockout", err)
	}
	st, killed, err := s.lockout(ctx, c, req.GetReason())
	if err != nil {
		return nil, err
	}
	return &coilyv1.LockoutResponse{Lockout: stopProto(st), Killed: int32(killed)}, nil
}

// lockout locks out for caller c: the steps of Lockout, after validation.
func (s *Server) lockout(ctx context.Context, c access.Caller, reason string) (store.Stop, int, error) {
	st, already, killed := s.stops.Lockout(store.Stop{Active: true, By: c.Principal, Reason: reason, Since: s.cfg.Now()})
	rejected := s.approvals.RejectAll()
	rec := access.CallerRecord(c, coilyv1grpc.CoilyService_Lockout_FullMethodName, "lockout", reason)
	rec.Killed = killed
	rec.Details = map[string]string{"approvals_rejected": strconv.Itoa(rejected)}
	// Cached credentials are dropped (and the Vault token revoked when so
	// configured); a failed revocation is recorded, the lockout stands.
	if err := s.cfg.Keystore.Lockout(context.WithoutCancel(ctx)); err != nil {
		s.log.Error("keystore lockout hook", "err", err)
		rec.Details["keystore_error"] = err.Error()
	}
	// Every descriptor signing key is replaced: no sandbox can sign a
	// request the server accepts until an owner rotates its key again.
	if err := s.rotateAllKeys(); err != nil {
		s.log.Error("rotate signing keys on lockout", "err", err)
		rec.Details["keys_error"] = err.Error()
	}
	// The lockout is in force even if it cannot be persisted; the caller
	// learns that it will not survive a restart.
	err := s.recordControl(ctx, rec, "allow", s.stops.PersistLockout(st))
	if !already {
		// In force whether or not it could be persisted: the owner hears
		// of it either way.
		s.notify(notify.Event{Kind: notify.KindLockout, Stop: &notify.Stop{By: c.Principal, Reason: reason,
			Killed: killed, Rejected: rejected}})
	}
	return st, killed, err
}

// Unlock lifts a lockout. It persists first: if the new state cannot be
// written, the server stays locked.
func (s *Server) Unlock(ctx context.Context, req *coilyv1.UnlockRequest) (*coilyv1.UnlockResponse, error) {
	c, err := access.CallerFrom(ctx)
	if err != nil {
		return nil, err
	}
	if err := wire.CheckText("reason", req.GetReason()); err != nil {
		return nil, s.refuseControl(ctx, c, "unlock", err)
	}
	st := store.Stop{Active: false, By: c.Principal, Reason: req.GetReason(), Since: s.cfg.Now()}
	// Loosening: audited first, so a failed audit changes nothing.
	rec := access.CallerRecord(c, coilyv1grpc.CoilyService_Unlock_FullMethodName, "unlock", req.GetReason())
	err = s.stops.Unlock(st, func() error { return s.recordControl(ctx, rec, "allow", nil) },
		func(err error) error { return s.recordControl(ctx, rec, "refuse", err) })
	if err != nil {
		return nil, err
	}
	return &coilyv1.UnlockResponse{Lockout: stopProto(st)}, nil
}

// Pause refuses new Execs; running ones finish. A caller with the pause
// permission pauses the server; one allowed only to exec pauses itself
// (its own new commands: those of its principal, which every node with
// the same tag shares), so that no agent stops the others.
func (s *Server) Pause(ctx context.Context, req *coilyv1.PauseRequest) (*coilyv1.PauseResponse, error) {
	c, err := access.CallerFrom(ctx)
	if err != nil {
		return nil, err
	}
	if err := wire.CheckText("reason", req.GetReason()); err != nil {
		return nil, s.refuseControl(ctx, c, "pause", err)
	}
	if !slices.Contains(s.policyFrom(ctx).Permissions(c.Subject()), policy.PermPause) {
		return s.pauseSelf(ctx, c, req.GetReason())
	}
	st, already, running, persisted := s.stops.Pause(store.Stop{Active: true, By: c.Principal, Reason: req.GetReason(), Since: s.cfg.Now()})
	rec := access.CallerRecord(c, coilyv1grpc.CoilyService_Pause_FullMethodName, "pause", req.GetReason())
	err = s.recordControl(ctx, rec, "allow", persisted)
	if !already {
		s.notify(notify.Event{Kind: notify.KindPause, Stop: &notify.Stop{By: c.Principal, Reason: req.GetReason(), Running: running}})
	}
	if err != nil {
		return nil, err
	}
	return &coilyv1.PauseResponse{Pause: stopProto(st), Running: int32(running)}, nil
}

// pauseSelf pauses the caller's own new commands, persisted like the
// server's pause and lifted by Resume (stops.Controls.PauseSelf).
func (s *Server) pauseSelf(ctx context.Context, c access.Caller, reason string) (*coilyv1.PauseResponse, error) {
	st, running, persisted := s.stops.PauseSelf(c.Principal, store.Stop{Active: true, By: c.Principal, Reason: reason, Since: s.cfg.Now()})
	rec := access.CallerRecord(c, coilyv1grpc.CoilyService_Pause_FullMethodName, "pause", reason)
	rec.Details = map[string]string{"scope": "self"}
	if err := s.recordControl(ctx, rec, "allow", persisted); err != nil {
		return nil, err
	}
	out := stopProto(st)
	out.Principal = c.Principal
	return &coilyv1.PauseResponse{Pause: out, Running: int32(running)}, nil
}

// Resume lifts a pause, persisting first.
func (s *Server) Resume(ctx context.Context, req *coilyv1.ResumeRequest) (*coilyv1.ResumeResponse, error) {
	c, err := access.CallerFrom(ctx)
	if err != nil {
		return nil, err
	}
	if err := wire.CheckText("reason", req.GetReason()); err != nil {
		return nil, s.refuseControl(ctx, c, "resume", err)
	}
	st := store.Stop{Active: false, By: c.Principal, Reason: req.GetReason(), Since: s.cfg.Now()}
	// Loosening: audited first, so a failed audit changes nothing. The
	// server's pause and every principal's pause of itself are lifted
	// together, in one write, or not at all.
	rec := access.CallerRecord(c, coilyv1grpc.CoilyService_Resume_FullMethodName, "resume", req.GetReason())
	err = s.stops.Resume(st, func() error { return s.recordControl(ctx, rec, "allow", nil) },
		func(err error) error { return s.recordControl(ctx, rec, "refuse", err) })
	if err != nil {
		return nil, err
	}
	return &coilyv1.ResumeResponse{Pause: stopProto(st)}, nil
}

// Status reports the stop state, the caller and what runs.
func (s *Server) Status(ctx context.Context, _ *coilyv1.StatusRequest) (*coilyv1.StatusResponse, error) {
	c, err := access.CallerFrom(ctx)
	if err != nil {
		return nil, err
	}
	pol := s.policyFrom(ctx)
	var perms []string
	for _, p := range pol.Permissions(c.Subject()) {
		perms = append(perms, string(p))
	}
	state, running := s.stops.State()
	var self []*coilyv1.StopState
	seesAll := slices.Contains(perms, string(policy.PermStatus))
	for _, who := range slices.Sorted(maps.Keys(state.SelfPauses)) {
		if st := state.SelfPauses[who]; st.Active && (seesAll || who == c.Principal) {
			p := stopProto(st)
			p.Principal = who
			self = append(self, p)
		}
	}
	return &coilyv1.StatusResponse{
		SelfPauses: self,
		Lockout:    stopProto(state.Lockout), Pause: stopProto(state.Pause),
		Caller: &coilyv1.Caller{Principal: c.Principal, Transport: c.Transport, Roles: pol.Roles(c.Subject()),
			Permissions: perms, Peer: c.Peer},
		Running: int32(running), Version: s.cfg.Version, StartedAt: timestamppb.New(s.started),
		PolicyPath: pol.Path, PolicySha256: pol.SHA256, Sandboxes: pol.Sandboxes(),
		PendingApprovals: int32(s.approvals.PendingCount()),
	}, nil
}

// controlMethods names the RPC of each control event.
var controlMethods = map[string]string{"lockout": "Lockout", "unlock": "Unlock", "pause": "Pause", "resume": "Resume",
	"relay": "Relay", "relay.teardown": "RelayTeardown", "key.issue": "IssueKey", "key.rotate": "RotateKeys"}

// recordControl audits a control call with its decision. opErr is a failure
// of the operation itself (e.g. persisting the state): it is audited as
// internal and returned. An audit failure is returned as internal.
func (s *Server) recordControl(ctx context.Context, rec audit.Record, decision string, opErr error) error {
	rec.Decision = decision
	if opErr != nil {
		rec.Code = string(stateCode(opErr))
		rec.Details = maps.Clone(rec.Details) // the call's own details stay
		if rec.Details == nil {
			rec.Details = map[string]string{}
		}
		rec.Details["error"] = opErr.Error()
	}
	out, err := s.record(context.WithoutCancel(ctx), rec)
	if err != nil {
		return refusal.Wrap(refusal.Internal, err, "audit log unavailable")
	}
	if opErr != nil {
		return refusal.WithAudit(refusal.Wrap(stateCode(opErr), opErr, "%s could not be persisted%s", rec.Event, store.ChangedHint(opErr)), out.ID)
	}
	return nil
}

// outcome is the decision to record for an action that failed with err:
// an action that did not happen is a refusal, not an "allow".
func outcome(err error) string {
	if err != nil {
		return "refuse"
	}
	return "allow"
}

// stateCode is the refusal code of a failure to read or write the state:
// state-unavailable when the store says it is out of reach, internal
// otherwise.
func stateCode(err error) refusal.Code {
	if errors.Is(err, store.ErrUnavailable) {
		return refusal.StateUnavailable
	}
	return refusal.Internal
}

// refuseControl audits a refused control call and returns the refusal.
func (s *Server) refuseControl(ctx context.Context, c access.Caller, event string, err error) error {
	r := refusal.As(err)
	rec := access.CallerRecord(c, "/"+coilyv1grpc.CoilyService_ServiceDesc.ServiceName+"/"+controlMethods[event], event, "")
	rec.Decision, rec.Code, rec.Reason = "refuse", string(r.Code), r.Msg
	out, aerr := s.record(ctx, rec)
	if aerr != nil {
		return refusal.Wrap(refusal.Internal, aerr, "audit log unavailable")
	}
	return refusal.WithAudit(err, out.ID)
}

func stopProto(st store.Stop) *coilyv1.StopState {
	out := &coilyv1.StopState{Active: st.Active, By: st.By, Reason: st.Reason}
	if !st.Since.IsZero() {
		out.Since = timestamppb.New(st.Since)
	}
	return out
}

// stopActive says whether the lockout (or the pause) is in force.
func (s *Server) stopActive(lockout bool) bool {
	state, _ := s.stops.State()
	if lockout {
		return state.Lockout.Active
	}
	return state.Pause.Active
}

// jobCount counts the Exec requests admitted and not yet answered.
func (s *Server) jobCount() int {
	_, running := s.stops.State()
	return running
}
