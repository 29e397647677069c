package server

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/durationpb"

	"coily.dev/coily/access"
	"coily.dev/coily/approvals"
	"coily.dev/coily/attach"
	"coily.dev/coily/audit"
	"coily.dev/coily/descriptor"
	"coily.dev/coily/policy"
	coilyv1 "coily.dev/coily/proto/coily/v1"
	coilyv1grpc "coily.dev/coily/proto/coily/v1/coilyv1grpc"
	"coily.dev/coily/refusal"
	"coily.dev/coily/sandbox"
	"coily.dev/coily/scrub"
	"coily.dev/coily/stops"
	"coily.dev/coily/store"
	"coily.dev/coily/supervise"
	"coily.dev/coily/wire"
	"coily.dev/coily/workspace"
)

// execution is one Exec request on its way through the pipeline.
type execution struct {
	// id is the server's own, unique across every transport.
	id string
	// relayID is the id of a relayed request's descriptor, which names its
	// answer; "" for other transports.
	relayID   string
	caller    access.Caller
	req       *coilyv1.ExecRequest
	policy    *policy.Policy // the policy the request was admitted under
	rule      *policy.Rule
	wouldDeny []string
	approval  *coilyv1.Approval
	box       sandbox.Sandbox
	// user is who its sandbox runs as on the host (zero: the server
	// itself); dynamic marks a uid of its own from the server's pool.
	user    sandbox.User
	dynamic bool
	exe     *os.File          // the rule's binary, opened and checked (prepare)
	secrets map[string]string // fetched credentials, by variable name
	scrub   *scrub.Set        // their values' forms, redacted from output
	job     *stops.Job
	// claim is its hold on the concurrency slots (a slot, or a place
	// among its principal's requests waiting for an approval or a slot).
	claim stops.Claim
	// confirm: the execution waits for a human's approval, which its rule,
	// an obligation (policy.Decision) or its relayed descriptor asks for.
	confirm        bool
	confirmTimeout time.Duration
	confirmBy      *policy.Rule // the confirm rule whose obligation asks, when not the rule itself
	// method is the RPC the execution arrived by (Exec or Relay).
	method string
	// cancel ends the execution's context (a kill before it runs).
	cancel context.CancelCauseFunc
	// out receives the execution's events (approval, output, exit).
	out sender
	// attached are what the execution carries besides its command (its
	// rule's, package attach), in the order they are readied; run is
	// what they were readied for and what they give the command.
	attached []attach.Attachment
	run      *attach.Run

	// What step 9 readies for the run, in the order it is readied: the
	// private home (scratch, removed after), the workspace root and the
	// working directory in it, the attachments (x.run), and the command
	// wrapped in its sandbox.
	home, root, dir string
	cmd             *exec.Cmd
	conf            *sandbox.Confinement
	// undo holds what the readying steps must undo once the execution is
	// over, in the order they were readied (undone in reverse).
	undo []func()
}

// onDone registers f to run when the execution is over (see finish).
func (x *execution) onDone(f func()) { x.undo = append(x.undo, f) }

// finish undoes what the readying steps set up, last first.
func (x *execution) finish() {
	for i := len(x.undo) - 1; i >= 0; i-- {
		x.undo[i]()
	}
	x.undo = nil
}

// auditRecord starts an audit record describing the execution.
func (x *execution) auditRecord(event string) audit.Record {
	r := audit.Record{
		Event: event, Method: cmp.Or(x.method, coilyv1grpc.CoilyService_Exec_FullMethodName), RequestID: x.id, RelayID: x.relayID,
		Principal: x.caller.Principal, Transport: x.caller.Transport, Peer: x.caller.Peer,
		Argv: x.req.GetArgv(),
	}
	if x.rule != nil {
		r.Rule = x.rule.Name
	}
	if x.box != nil {
		r.Sandbox = x.box.Name()
	}
	if n := x.req.GetNote(); n != "" {
		r.SetDetail("note", n)
	}
	if a := x.approval; a != nil {
		r.SetDetail("approval_id", a.GetId())
		r.SetDetail("approval_state", a.GetState().String())
		r.SetDetail("approved_by", a.GetDecidedBy())
	}
	if x.dynamic {
		r.SetDetail("sandbox_uid", strconv.Itoa(x.user.UID)) // the command's own (sandbox.UIDPool)
	}
	r.SetList("would_deny", x.wouldDeny)
	r.SetList("env", slices.Sorted(maps.Keys(x.req.GetEnv()))) // names only, never values
	if x.rule != nil {
		for _, a := range x.attached {
			a.Describe(&r) // names and references, never values
		}
	}
	return r
}

// Exec implements the Exec pipeline (docs/architecture.md). Each step either passes or
// refuses with a stable code; every refusal and the final result are
// audited.
func (s *Server) Exec(req *coilyv1.ExecRequest, stream grpc.ServerStreamingServer[coilyv1.ExecResponse]) error {
	ctx := stream.Context()
	caller, err := access.CallerFrom(ctx) // 1–2. identified and authorized by the interceptor
	if err != nil {
		return err
	}
	return s.execute(ctx, &execution{id: newID(), caller: caller, req: req, policy: s.policyFrom(ctx)}, stream)
}

// execute is the Exec pipeline (docs/architecture.md), for every transport: each
// step is a call that passes or refuses with a stable code; a refusal is
// audited (refuseExec), the run's result too (runExec). Steps 1–2 (identity,
// method) ran in the interceptor; step 4, the relay checks, in Relay.
func (s *Server) execute(ctx context.Context, x *execution, out sender) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	x.cancel = cancel
	// One place undoes what the steps did (finish, last first): the steps
	// register their own undoing as they go; these two come first, so they
	// run last. release is idempotent (runExec releases before it answers);
	// closeAttachments ends what a path that audited no end still holds
	// (leases and tokens are revoked all the same).
	x.onDone(func() { s.release(x) })
	x.onDone(func() { x.closeAttachments(ctx, nil) })
	defer x.finish()
	x.out = out
	for _, step := range []func(context.Context, *execution) error{
		s.validate,         // the request's own limits
		s.admitState,       // 3. lockout and pause
		s.decideRule,       // 5. policy
		s.admitSlot,        // 6. concurrency (or a place among those awaiting approval)
		s.takeToken,        // 6. rate
		s.confirm,          // 7. a human's approval, when the rule asks
		s.decideAgain,      // 5. again, when the policy changed while it waited
		s.waitSlot,         //    an approved request's slot
		s.openBinary,       //    the rule's binary, opened and its pin checked
		s.fetchCredentials, // 8. credentials, fail closed
		s.lookupSandbox,    // 9. the rule's sandbox backend
		s.chooseUser,       // 9. who it runs as on the host
		s.makeHome,         // 9. a private home in the scratch directory
		s.lockWorkspace,    // 9. the workspace, one command at a time
		s.attach,           // 9. what the execution carries: egress proxy, ssh agent, CA bundle (package attach)
		s.wrapSandbox,      // 9. the command inside its sandbox
		s.stillWanted,      //    not cancelled while it was readied
	} {
		if err := step(ctx, x); err != nil {
			return s.refuseExec(ctx, x, err)
		}
	}
	return s.runExec(ctx, x) // 10–11. run, stream, audit
}

// sender receives an Exec's events: the gRPC stream, or the collector of
// a relayed request.
type sender interface {
	Send(*coilyv1.ExecResponse) error
}

// validate checks the request's own limits (sizes, names, characters).
func (s *Server) validate(_ context.Context, x *execution) error {
	if err := wire.CheckExec(x.req); err != nil {
		x.req = &coilyv1.ExecRequest{} // never echo hostile input into the audit log
		return err
	}
	return nil
}

// admitState refuses under a lockout or pause, and otherwise registers
// the execution's job, atomically: a lockout cannot miss a command
// admitted concurrently (step 3).
func (s *Server) admitState(_ context.Context, x *execution) error {
	j, err := s.admitJob(x, x.cancel)
	if err != nil {
		return err
	}
	x.job = j
	return nil
}

// decideRule finds the rule that allows the request, under the policy the
// call was admitted under (step 5).
func (s *Server) decideRule(_ context.Context, x *execution) error {
	d := x.decide(x.policy)
	x.wouldDeny = d.WouldDeny
	if d.Result != policy.Allow {
		return refusal.New(refusal.PolicyDeny, "%s", d.Reason)
	}
	x.rule, x.confirm, x.confirmTimeout, x.confirmBy = d.Rule, x.confirm || d.Confirm != nil, d.ConfirmTimeout, d.Confirm
	x.req.Cwd = workspace.CallerCwd(x.policy, x.rule, x.req.GetCwd(), x.req.GetCallerDir()) // what the approver sees is where it runs
	x.attached = s.attachmentsOf(x, d)
	x.job.Decided(x.rule.Name, "")
	return nil
}

// admitSlot takes a concurrency slot before the rate token, so a request
// refused for want of a slot spends no token (step 6). One that needs an
// approval holds no slot while a human decides: it counts as waiting, and
// takes its slot once approved (waitSlot).
func (s *Server) admitSlot(_ context.Context, x *execution) error {
	x.claim = stops.Claim{Principal: x.caller.Principal, Rule: x.rule, Policy: x.policy}
	if x.confirm {
		return s.stops.AdmitWaiter(&x.claim)
	}
	return s.stops.TakeSlot(&x.claim)
}

// waitSlot takes a slot for an approved request, waiting for one if none
// is free (stops.Controls.WaitSlot), under the rule and policy it was
// decided again under.
func (s *Server) waitSlot(ctx context.Context, x *execution) error {
	x.claim.Rule, x.claim.Policy = x.rule, x.policy
	return s.stops.WaitSlot(ctx, &x.claim)
}

// takeToken spends one token of the rule's rate limit for this principal.
func (s *Server) takeToken(_ context.Context, x *execution) error {
	r := x.rule.Rate
	if r == nil {
		return nil
	}
	ok, retry, err := s.cfg.Shared.Take(x.caller.Principal+"\x00"+x.rule.Name,
		store.Rate{PerMinute: r.PerMinute, Burst: r.Burst}, s.cfg.Now())
	switch {
	case err != nil:
		return refusal.Wrap(stateCode(err), err, "rate-limit state unavailable")
	case !ok:
		return &refusal.Error{Code: refusal.RateLimit, RetryAfter: retry,
			Msg: fmt.Sprintf("rule %q allows %d calls a minute (burst %d); retry in %s", x.rule.Name, r.PerMinute, r.Burst, retry.Round(time.Millisecond))}
	}
	return nil
}

// confirm waits for a human's approval when the rule asks for one (step 7).
func (s *Server) confirm(ctx context.Context, x *execution) error {
	if !x.confirm {
		return nil
	}
	ap := s.approvals.Create(approvals.Request{ID: x.id, Requester: x.caller.Principal, Exec: x.req, Rule: x.rule, Confirm: x.confirmBy}, x.confirmTimeout)
	asked := ap.Snapshot()
	x.job.Decided(x.rule.Name, asked.GetId())
	defer x.job.Decided(x.rule.Name, "")
	rec := x.auditRecord("approval.request")
	rec.SetDetail("approval_id", asked.GetId()) // what the agent and the approver see: `coily audit show` finds the request by it
	rec.Details["approval_rule"] = asked.GetRule()
	if c := x.req.GetCwd(); c != "" {
		rec.Details["cwd"] = c
	}
	if n := asked.GetStdinBytes(); n > 0 {
		rec.Details["stdin_bytes"], rec.Details["stdin_sha256"] = strconv.FormatInt(n, 10), asked.GetStdinSha256()
	}
	if _, err := s.record(ctx, rec); err != nil {
		s.approvals.Settle(ap, coilyv1.ApprovalState_APPROVAL_STATE_CANCELLED, "", "")
		return refusal.Wrap(refusal.Internal, err, "audit log unavailable")
	}
	if err := x.out.Send(&coilyv1.ExecResponse{Event: &coilyv1.ExecResponse_Approval{Approval: ap.Snapshot()}}); err != nil {
		s.approvals.Settle(ap, coilyv1.ApprovalState_APPROVAL_STATE_CANCELLED, "", "")
		return refusal.Wrap(refusal.Internal, err, "caller went away")
	}
	s.notifyApproval(ap)
	a, err := s.approvals.Wait(ctx, ap)
	x.approval = a
	return err
}

// decide is the policy's decision on the request, by its caller, with
// the variables a shim offered that the allowing rule passes (pass_env);
// the others are dropped, kept nowhere.
func (x *execution) decide(p *policy.Policy) policy.Decision {
	x.req.Env, x.req.PassEnv = p.WithPassEnv(x.caller.Subject(), x.req.GetArgv(), x.req.GetEnv(), x.req.GetPassEnv()), nil
	return p.DecideExec(x.caller.Subject(), policy.Request{Argv: x.req.GetArgv(), Env: slices.Sorted(maps.Keys(x.req.GetEnv()))})
}

// decideAgain decides an approved request again when the policy was
// reloaded while it waited (up to confirm_timeout): a grant revoked, or a
// rule removed or changed by the owner in the meantime, applies to it as
// to a new request. It must be allowed by the very rule the approver saw,
// unchanged (only moved in the file); anything else is asked again.
func (s *Server) decideAgain(_ context.Context, x *execution) error {
	now := s.Policy()
	if !x.confirm || now == nil || now == x.policy {
		return nil
	}
	d := x.decide(now)
	switch {
	case d.Result != policy.Allow:
		return refusal.New(refusal.PolicyDeny, "the policy changed while the request waited for approval: %s", d.Reason)
	case d.Rule.Name != x.rule.Name:
		return refusal.New(refusal.PolicyDeny, "the policy changed while the request waited for approval: rule %q now allows it instead of %q; ask again", d.Rule.Name, x.rule.Name)
	case !d.Rule.SameAs(x.rule) || !sameWorkspace(x.policy, now, x.rule.Workspace):
		return refusal.New(refusal.PolicyDeny, "the policy changed while the request waited for approval: rule %q is not what was approved; ask again", x.rule.Name)
	}
	x.policy, x.rule = now, d.Rule
	x.attached = s.attachmentsOf(x, d)
	return nil
}

// sameWorkspace reports whether the named workspace is the same directory
// under both policies (a rule names its workspace; the policy says where it
// is).
func sameWorkspace(a, b *policy.Policy, name string) bool {
	if name == "" || name == policy.WorkspaceTemp {
		return true
	}
	da, oka := a.Workspace(name)
	db, okb := b.Workspace(name)
	return oka == okb && da == db && a.WorkspaceAtLoad(name) == b.WorkspaceAtLoad(name)
}

// openBinary opens the rule's binary and checks its pinned digest: the
// command runs from this open file.
func (s *Server) openBinary(_ context.Context, x *execution) error {
	exe, err := x.rule.OpenBinary()
	if err != nil {
		return refusal.Wrap(refusal.PolicyDeny, err, "binary for rule %q failed its check", x.rule.Name)
	}
	x.exe = exe
	return nil
}

// lookupSandbox finds the rule's sandbox backend; none means no run
// (step 9: never unsandboxed unless the rule names native).
func (s *Server) lookupSandbox(_ context.Context, x *execution) error {
	box, err := s.cfg.Sandboxes.Lookup(x.rule.Sandbox)
	if err != nil {
		return refusal.Wrap(refusal.SandboxUnavailable, err, "sandbox %q is not available on this server", x.rule.Sandbox)
	}
	x.box = box
	return nil
}

// refuseExec audits a refusal and returns it (or internal, when even the
// refusal cannot be audited).
func (s *Server) refuseExec(ctx context.Context, x *execution, err error) error {
	if x.job != nil && x.job.StopReason() == refusal.CommandKilled && refusal.As(err).Code != refusal.CommandKilled {
		err = refusal.Wrap(refusal.CommandKilled, err, "killed before it ran")
	}
	s.release(x)
	s.metrics.ExecRefused(x.rule)
	err = supervise.ScrubRefusal(x.scrub, err)
	r := refusal.As(err)
	rec := x.auditRecord("exec.decision")
	rec.Decision, rec.Code, rec.Reason = "refuse", string(r.Code), r.Msg
	x.closeAttachments(ctx, &attach.End{Record: &rec})
	out, aerr := s.record(context.WithoutCancel(ctx), rec)
	if aerr != nil {
		return refusal.Wrap(refusal.Internal, aerr, "audit log unavailable")
	}
	return refusal.WithAudit(err, out.ID)
}

// makeHome creates the execution's private home in the scratch directory,
// removed once it is over (a crash leaves it to the next start's sweep).
func (s *Server) makeHome(_ context.Context, x *execution) error {
	home, err := workspace.NewDir(s.cfg.ScratchDir, scratchPrefix)
	if err != nil {
		return refusal.Wrap(refusal.Internal, err, "could not create a working directory")
	}
	x.home = home
	x.onDone(func() { os.RemoveAll(home) })
	return nil
}

// lockWorkspace resolves the workspace and working directory and, for a
// named workspace, takes it for this command alone: nothing else a
// sandbox runs can change it between the scan of its protected entries
// and their mounts, and what a command leaves behind is its own.
func (s *Server) lockWorkspace(ctx context.Context, x *execution) error {
	root, dir, err := workspace.Resolve(x.policy, x.rule, x.home, x.req.GetCwd(), s.userHomes())
	if err != nil {
		return err
	}
	x.root, x.dir = root, dir
	if root == x.home {
		return nil
	}
	unlock, err := s.workspaces.Lock(ctx, root)
	if err != nil {
		return refusal.Wrap(refusal.ConcurrencyBusy, err, "workspace %s is in use by another command", x.rule.Workspace)
	}
	x.onDone(unlock)
	return s.workspaceGuard().Usable(ctx, x.place())
}

// wrapSandbox builds the command (argv[0] as the caller gave it, the
// rule's binary) and wraps it in the rule's sandbox with the default
// profile.
func (s *Server) wrapSandbox(ctx context.Context, x *execution) error {
	cmd := exec.Command(x.rule.Resolved, x.req.GetArgv()[1:]...)
	cmd.Args[0] = x.req.GetArgv()[0]
	limits := x.rule.Limits
	if limits.CPU == 0 {
		limits.CPU = s.timeout(x)
	}
	dynamic, err := s.dynamicUser(x)
	if err != nil {
		return err
	}
	conf, err := x.box.Wrap(ctx, cmd, sandbox.DefaultProfile(sandbox.ProfileInput{
		Workspace: x.root, Home: x.home, Dir: x.dir, Env: sandbox.Environ(x.home, x.childEnv()),
		Network: sandbox.Network(x.rule.Network), StateDir: s.cfg.StateDir, Socket: s.cfg.Socket, OwnFiles: s.cfg.OwnFiles,
		Binds:     x.run.Binds,
		UserHomes: s.userHomes(), Writable: x.rule.Writable, ScanBudget: s.cfg.ScanBudget, Exec: x.exe, ExecPath: x.rule.Resolved, ExecName: x.rule.Binary,
		Limits: limits, User: s.cfg.SandboxUser, Dynamic: dynamic,
	}))
	if msg, ok := accessRefusal(x, err); ok {
		return refusal.Wrap(refusal.SandboxUnavailable, err, "%s", msg)
	}
	if err != nil {
		return refusal.Wrap(refusal.SandboxUnavailable, err, "sandbox %q could not be set up: %v", x.box.Name(), err)
	}
	x.cmd, x.conf = cmd, conf
	x.onDone(func() { conf.Close() })
	return nil
}

// stillWanted refuses a request cancelled while it was readied (a relayed
// request's teardown): it never starts.
func (s *Server) stillWanted(ctx context.Context, _ *execution) error {
	if err := context.Cause(ctx); err != nil {
		return refusal.Wrap(refusal.Internal, err, "cancelled before it started")
	}
	return nil
}

// runExec audits the decision, runs the command, streams its output and
// audits the result (steps 10–11).
func (s *Server) runExec(ctx context.Context, x *execution) error {
	rec := x.auditRecord("exec.decision")
	rec.Decision = "allow"
	dec, err := s.recordPending(ctx, rec)
	if err != nil {
		s.metrics.ExecRefused(x.rule)
		s.metrics.Refused(string(refusal.Internal))
		return refusal.Wrap(refusal.Internal, err, "audit log unavailable; command not run")
	}
	req := store.Request{ID: x.id, Principal: x.caller.Principal, Rule: x.rule.Name, Argv: x.req.GetArgv(),
		Started: s.cfg.Now()}
	err = x.out.Send(&coilyv1.ExecResponse{Event: &coilyv1.ExecResponse_Started{Started: &coilyv1.ExecStarted{
		RequestId: x.id, Rule: x.rule.Name, Sandbox: x.box.Name(), AuditId: dec.ID}}})
	if err != nil {
		_, err = s.finishExec(ctx, x, &req, supervise.Result{}, refusal.Wrap(refusal.Internal, err, "caller went away"))
		s.saveRequest(req)
		return err
	}

	runCtx, cancel := context.WithTimeoutCause(ctx, s.timeout(x), supervise.ErrTimeout)
	defer cancel()
	out := supervise.NewOutput(x.scrub, func(c supervise.Chunk) error {
		return x.out.Send(&coilyv1.ExecResponse{Event: &coilyv1.ExecResponse_Output{
			Output: &coilyv1.ExecOutput{Stream: c.Stream, Data: c.Data}}})
	})
	stopKeeping := x.keepAttachments(time.Now().Add(s.timeout(x))) // a lease renewed while the command runs
	res, runErr := supervise.Run(runCtx, x.job, x.cmd, x.conf, x.id[:8], x.req.GetStdin(), x.rule.MaxOutput, out.Emit)
	stopKeeping()
	runErr = out.Finish(runErr)
	exit, err := s.finishExec(ctx, x, &req, res, runErr)
	s.workspaceGuard().RefuseUnchecked(ctx, x.place(), x.scrub, res.Report.Unchecked)
	// The command is over: free its slot before the caller hears so, or
	// the caller's next request could find it still taken.
	s.release(x)
	if err == nil {
		err = x.out.Send(&coilyv1.ExecResponse{Event: &coilyv1.ExecResponse_Exit{Exit: exit}})
	}
	s.saveRequest(req)
	return err
}

// finishExec records the outcome in the audit log (fsynced, which also
// makes the decision line durable) and returns the exit event or the
// refusal that ended the command. It completes req, which the caller saves
// to the store after answering (see saveRequest).
func (s *Server) finishExec(ctx context.Context, x *execution, req *store.Request, res supervise.Result, runErr error) (*coilyv1.ExecExit, error) {
	rec := x.auditRecord("exec.result")
	exit := &coilyv1.ExecExit{PolicySha256: x.policy.SHA256}
	x.closeAttachments(ctx, &attach.End{Record: &rec, Result: true, Exit: exit}) // the command is over: its credentials end with it, the proxy, the agent and their connections too
	rec.DurationMS = float64(res.Duration.Microseconds()) / 1000
	supervise.AddReport(&rec, res.Report, x.scrub)
	req.Finished, req.State = s.cfg.Now(), store.RequestFinished
	s.metrics.ExecEnded(x.rule, res.Duration, rec.Egress)
	runErr = supervise.ScrubRefusal(x.scrub, runErr)
	if runErr != nil {
		s.metrics.ExecRefused(x.rule)
		r := refusal.As(runErr)
		rec.Decision, rec.Code, rec.Reason = "refuse", string(r.Code), r.Msg
		req.State, req.Code = store.RequestFailed, string(r.Code)
	} else {
		s.metrics.ExecRan(x.rule, res.ExitCode, res.Signal)
		rec.Decision, rec.ExitCode, rec.Signal = "allow", &res.ExitCode, res.Signal
		req.ExitCode, req.Signal = res.ExitCode, res.Signal
	}
	out, auditErr := s.record(context.WithoutCancel(ctx), rec)
	switch {
	case auditErr != nil:
		return nil, refusal.Wrap(refusal.Internal, auditErr, "audit log unavailable")
	case runErr != nil:
		return nil, refusal.WithAudit(runErr, out.ID)
	}
	exit.ExitCode, exit.Signal, exit.Duration = int32(res.ExitCode), int32(res.Signal), durationpb.New(res.Duration)
	exit.StdoutTruncated = res.Truncated[coilyv1.Stream_STREAM_STDOUT]
	exit.StderrTruncated = res.Truncated[coilyv1.Stream_STREAM_STDERR]
	exit.AuditId = out.ID
	return exit, nil
}

// saveRequest stores the request record, after the caller has its answer.
// The audit log is the record of truth and is durable before the caller is
// answered; the store's copy is the index later stages look requests up by,
// so a failure is logged, not turned into a refusal of a command that
// already ran.
func (s *Server) saveRequest(req store.Request) {
	if err := s.cfg.Local.PutRequest(req); err != nil {
		s.log.Error("store request record", "request_id", req.ID, "err", err)
	}
}

// timeout is the caller's requested timeout, clamped to the rule's.
func (s *Server) timeout(x *execution) time.Duration {
	if t := x.req.GetTimeout(); t != nil && t.AsDuration() < x.rule.Timeout {
		return t.AsDuration()
	}
	return x.rule.Timeout
}

// userHomes are the homes whose secrets every sandbox denies: the server's
// user's and root's.
func (s *Server) userHomes() []string {
	homes := []string{"/root"}
	if h, err := os.UserHomeDir(); err == nil && h != "/root" {
		homes = append(homes, h)
	}
	return homes
}

// newID returns a random (version 4) UUID.
func newID() string { return descriptor.NewID() }
