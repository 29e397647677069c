package server

import (
	"context"
	"maps"
	"slices"
	"strconv"
	"syscall"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"coily.dev/coily/access"
	"coily.dev/coily/audit"
	"coily.dev/coily/notify"
	"coily.dev/coily/policy"
	coilyv1 "coily.dev/coily/proto/coily/v1"
	coilyv1grpc "coily.dev/coily/proto/coily/v1/coilyv1grpc"
	"coily.dev/coily/refusal"
	"coily.dev/coily/sandbox"
	"coily.dev/coily/store"
)

const sigKill = syscall.SIGKILL

// checkLockout refuses while the server is locked out.
func (s *Server) checkLockout() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if l := s.stops.Lockout; l.Active {
		return lockoutRefusal(l)
	}
	return nil
}

func lockoutRefusal(l store.Stop) error {
	return refusal.New(refusal.LockoutActive, "server is locked out since %s by %s; an operator must unlock it", l.Since.UTC().Format(time.RFC3339), l.By)
}

// admitJob checks the stop controls and, if they allow it, registers a job
// under the same lock, so that a concurrent Lockout either refuses this
// request or sees (and kills) its job.
func (s *Server) admitJob(x *execution, cancel context.CancelCauseFunc) (*job, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.stoppedLocked(x.caller.Principal); err != nil {
		return nil, err
	}
	id := x.id
	j := &job{id: id, principal: x.caller.Principal, argv: x.req.GetArgv(), admitted: s.cfg.Now(), cancel: cancel}
	s.jobs[id] = j
	return j, nil
}

// stopped is the refusal the stop state gives a new request of principal,
// if any.
func (s *Server) stopped(principal string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stoppedLocked(principal)
}

func (s *Server) stoppedLocked(principal string) error {
	if s.closing {
		return refusal.New(refusal.Internal, "server is shutting down")
	}
	if l := s.stops.Lockout; l.Active {
		return lockoutRefusal(l)
	}
	if p := s.stops.Pause; p.Active {
		return refusal.New(refusal.PauseActive, "server is paused since %s by %s", p.Since.UTC().Format(time.RFC3339), p.By)
	}
	if p, ok := s.stops.SelfPauses[principal]; ok && p.Active {
		return refusal.New(refusal.PauseActive, "%s paused itself since %s; an owner resumes it (coily resume)", principal, p.Since.UTC().Format(time.RFC3339))
	}
	return nil
}

// release forgets an execution's job, frees its concurrency slot (handing
// it to an approved request waiting for one) and stops counting it as
// waiting. It is idempotent: the pipeline calls it on refusal and when
// answered.
func (s *Server) release(x *execution) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if x.job != nil {
		delete(s.jobs, x.job.id)
		x.job = nil
	}
	if x.exe != nil {
		x.exe.Close()
		x.exe = nil
	}
	s.slots.unwait(x)
	if s.slots.free(x) {
		s.slots.handOff()
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
	if err := validateText("reason", req.GetReason()); err != nil {
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
	st := store.Stop{Active: true, By: c.Principal, Reason: reason, Since: s.cfg.Now()}
	s.mu.Lock()
	already := s.stops.Lockout.Active
	if already {
		st = s.stops.Lockout // keep the first lockout's record
	}
	s.stops.Lockout = st
	s.slots.refuseQueued(lockoutRefusal(st))
	jobs := make([]*job, 0, len(s.jobs))
	for _, j := range s.jobs {
		jobs = append(jobs, j)
	}
	boxes := s.fleet.Snapshot()
	s.mu.Unlock()

	// Only commands that were running are counted as killed; an admitted
	// one that had not started yet is stopped before it starts.
	killed := 0
	for _, j := range jobs {
		if j.signal(syscall.SIGTERM, refusal.LockoutActive) {
			killed++
		}
	}
	s.escalate(jobs, func() { s.killSandboxes(boxes, st) })
	rejected := s.approvals.rejectAll()
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
	err := s.recordControl(ctx, rec, "allow", s.cfg.Store.SetLockout(st))
	if !already {
		// In force whether or not it could be persisted: the owner hears
		// of it either way.
		s.notify(notify.Event{Kind: notify.KindLockout, Stop: &notify.Stop{By: c.Principal, Reason: reason,
			Killed: killed, Rejected: rejected}})
	}
	return st, killed, err
}

// killSandboxes is a lockout's last step: it kills the sandboxes that
// were running at the lockout (boxes), whatever the job table says, and,
// if the lockout st is still in force, every sandbox and command cgroup of
// the server and every process of the uids it gives its commands (none may
// run under a lockout; one started after an unlock within the grace is
// left alone).
func (s *Server) killSandboxes(boxes []*sandbox.Confinement, st store.Stop) {
	for _, c := range boxes {
		c.Kill()
	}
	s.mu.Lock()
	still := s.stops.Lockout.Active && s.stops.Lockout.Since.Equal(st.Since)
	s.mu.Unlock()
	if still {
		s.fleet.Kill()
		s.uids.KillAll() // every process of every uid this server holds
	}
}

// escalate SIGKILLs the jobs' process groups after the grace period, then
// runs then (if not nil).
func (s *Server) escalate(jobs []*job, then func()) {
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		t := time.NewTimer(s.cfg.KillGrace)
		defer t.Stop()
		select {
		case <-t.C:
		case <-s.quit:
		}
		for _, j := range jobs {
			j.signal(syscall.SIGKILL, refusal.LockoutActive)
		}
		if then != nil {
			then()
		}
	}()
}

// Unlock lifts a lockout. It persists first: if the new state cannot be
// written, the server stays locked.
func (s *Server) Unlock(ctx context.Context, req *coilyv1.UnlockRequest) (*coilyv1.UnlockResponse, error) {
	c, err := access.CallerFrom(ctx)
	if err != nil {
		return nil, err
	}
	if err := validateText("reason", req.GetReason()); err != nil {
		return nil, s.refuseControl(ctx, c, "unlock", err)
	}
	st := store.Stop{Active: false, By: c.Principal, Reason: req.GetReason(), Since: s.cfg.Now()}
	s.mu.Lock()
	defer s.mu.Unlock()
	// Loosening: audited first, so a failed audit changes nothing.
	rec := access.CallerRecord(c, coilyv1grpc.CoilyService_Unlock_FullMethodName, "unlock", req.GetReason())
	if err := s.recordControl(ctx, rec, "allow", nil); err != nil {
		return nil, err
	}
	if err := s.cfg.Store.SetLockout(st); err != nil {
		return nil, s.recordControl(ctx, rec, "refuse", err)
	}
	s.stops.Lockout = st
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
	if err := validateText("reason", req.GetReason()); err != nil {
		return nil, s.refuseControl(ctx, c, "pause", err)
	}
	if !slices.Contains(s.policyFrom(ctx).Permissions(c.Subject()), policy.PermPause) {
		return s.pauseSelf(ctx, c, req.GetReason())
	}
	st := store.Stop{Active: true, By: c.Principal, Reason: req.GetReason(), Since: s.cfg.Now()}
	s.mu.Lock()
	already := s.stops.Pause.Active
	if already {
		st = s.stops.Pause
	}
	s.stops.Pause = st // a restriction: in force even if it cannot be persisted
	// Written under the lock, so that a Resume cannot land between memory
	// and file (the server would come back paused after a restart).
	persisted := s.cfg.Store.SetPause(st)
	running := len(s.jobs)
	s.mu.Unlock()
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
// server's pause and lifted by Resume. Memory and file change under s.mu,
// so concurrent pauses and a Resume never leave them apart.
func (s *Server) pauseSelf(ctx context.Context, c access.Caller, reason string) (*coilyv1.PauseResponse, error) {
	st := store.Stop{Active: true, By: c.Principal, Reason: reason, Since: s.cfg.Now()}
	s.mu.Lock()
	if old, ok := s.stops.SelfPauses[c.Principal]; ok && old.Active {
		st = old
	}
	pauses := maps.Clone(s.stops.SelfPauses)
	if pauses == nil {
		pauses = map[string]store.Stop{}
	}
	pauses[c.Principal] = st
	s.stops.SelfPauses = pauses // a restriction: in force even if it cannot be persisted
	persisted := s.cfg.Store.SetSelfPauses(pauses)
	running := 0
	for _, j := range s.jobs {
		if j.principal == c.Principal {
			running++
		}
	}
	s.mu.Unlock()
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
	if err := validateText("reason", req.GetReason()); err != nil {
		return nil, s.refuseControl(ctx, c, "resume", err)
	}
	st := store.Stop{Active: false, By: c.Principal, Reason: req.GetReason(), Since: s.cfg.Now()}
	s.mu.Lock()
	defer s.mu.Unlock()
	// Loosening: audited first, so a failed audit changes nothing.
	rec := access.CallerRecord(c, coilyv1grpc.CoilyService_Resume_FullMethodName, "resume", req.GetReason())
	if err := s.recordControl(ctx, rec, "allow", nil); err != nil {
		return nil, err
	}
	// The server's pause and every principal's pause of itself are
	// lifted together, in one write, or not at all.
	if err := s.cfg.Store.SetPauses(st, nil); err != nil {
		return nil, s.recordControl(ctx, rec, "refuse", err)
	}
	s.stops.Pause, s.stops.SelfPauses = st, nil
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
	s.mu.Lock()
	stops, running := s.stops, len(s.jobs)
	s.mu.Unlock()
	var self []*coilyv1.StopState
	seesAll := slices.Contains(perms, string(policy.PermStatus))
	for _, who := range slices.Sorted(maps.Keys(stops.SelfPauses)) {
		if st := stops.SelfPauses[who]; st.Active && (seesAll || who == c.Principal) {
			p := stopProto(st)
			p.Principal = who
			self = append(self, p)
		}
	}
	return &coilyv1.StatusResponse{
		SelfPauses: self,
		Lockout:    stopProto(stops.Lockout), Pause: stopProto(stops.Pause),
		Caller: &coilyv1.Caller{Principal: c.Principal, Transport: c.Transport, Roles: pol.Roles(c.Subject()),
			Permissions: perms, Peer: c.Peer},
		Running: int32(running), Version: s.cfg.Version, StartedAt: timestamppb.New(s.started),
		PolicyPath: pol.Path, PolicySha256: pol.SHA256, Sandboxes: pol.Sandboxes(),
		PendingApprovals: int32(s.approvals.pendingCount()),
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
		rec.Code = string(refusal.Internal)
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
		return refusal.WithAudit(refusal.Wrap(refusal.Internal, opErr, "%s could not be persisted", rec.Event), out.ID)
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
