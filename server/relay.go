package server

import (
	"context"
	"fmt"

	"google.golang.org/protobuf/types/known/durationpb"

	"coily.dev/coily/access"
	"coily.dev/coily/descriptor"
	"coily.dev/coily/policy"
	coilyv1 "coily.dev/coily/proto/coily/v1"
	coilyv1grpc "coily.dev/coily/proto/coily/v1/coilyv1grpc"
	"coily.dev/coily/refusal"
	"coily.dev/coily/relay"
	"coily.dev/coily/wire"
)

// Freshness: a descriptor is accepted when its created_at is at most
// RelayMaxAge old and at most RelayMaxSkew in the future (package relay).
const (
	RelayMaxAge  = relay.MaxAge
	RelayMaxSkew = relay.MaxSkew
)

// Relay implements the descriptor path: step 4 of the pipeline (the
// bridge's permission here, the descriptor's checks and exactly-once in
// package relay), then the Exec pipeline, exactly once per request id.
func (s *Server) Relay(ctx context.Context, req *coilyv1.RelayRequest) (*coilyv1.RelayResponse, error) {
	bridge, err := access.CallerFrom(ctx)
	if err != nil {
		return nil, err
	}
	if err := s.mayRelay(ctx, bridge, req.GetSandbox(), "relay"); err != nil {
		return nil, err
	}
	if _, ok := descriptor.IDFromName(descriptor.FileName(req.GetId())); !ok {
		return nil, s.refuseControl(ctx, bridge, "relay", refusal.New(refusal.BadRequest, "id must be a lower-case UUID"))
	}
	sandbox := req.GetSandbox()
	x := &execution{caller: access.Caller{Principal: policy.SandboxPrincipal(sandbox), Transport: "relay",
		Peer: "bridge " + bridge.Principal + " " + bridge.Peer}, req: &coilyv1.ExecRequest{}, policy: s.policyFrom(ctx),
		method: coilyv1grpc.CoilyService_Relay_FullMethodName,
		// The execution's id is the server's own, as for every transport:
		// the descriptor's id names only the answer (relayID), so nothing a
		// sandbox writes can collide with, replace or remove another
		// execution (the job table, the request records, the console's kill).
		id: newID(), relayID: req.GetId()}
	id, resp, held := s.relay.Relay(ctx, relayedExec{s: s, x: x}, x.caller, sandbox, req.GetId(), req.GetRequest())
	return &coilyv1.RelayResponse{Response: resp, Id: id, Duplicate: held}, nil
}

// mayRelay checks that the bridge may relay for the sandbox (audited when
// not).
func (s *Server) mayRelay(ctx context.Context, bridge access.Caller, sandbox, event string) error {
	var err error
	switch pol := s.policyFrom(ctx); {
	case !policy.SandboxNamePattern.MatchString(sandbox):
		err = refusal.New(refusal.BadRequest, "sandbox name must match %s", policy.SandboxNamePattern)
	case !pol.MayRelay(bridge.Subject(), sandbox):
		err = refusal.New(refusal.PermissionDenied, "%s may not relay for sandbox %q", bridge.Principal, sandbox)
	default:
		return nil
	}
	return s.refuseControl(ctx, bridge, event, err)
}

// relayedExec is a relayed request's execution, as package relay drives
// it.
type relayedExec struct {
	s *Server
	x *execution
}

// Refuse audits a refusal of the relayed request (refuseExec).
func (r relayedExec) Refuse(ctx context.Context, err error) error {
	return r.s.refuseExec(ctx, r.x, err)
}

// Admit takes the Exec the descriptor asks for: refused when malformed,
// or when the stop state refuses its principal.
func (r relayedExec) Admit(d *descriptor.Request) error {
	r.x.req = execRequest(d)
	r.x.confirm = d.RequiresConfirm
	if err := wire.CheckExec(r.x.req); err != nil {
		r.x.req = &coilyv1.ExecRequest{} // never echo hostile input into the audit log
		return err
	}
	return r.s.stops.Stopped(r.x.caller.Principal)
}

// Run runs the relayed request through the Exec pipeline.
func (r relayedExec) Run(ctx context.Context, out relay.Sender) error {
	return r.s.execute(ctx, r.x, out)
}

// execRequest is the Exec a descriptor asks for.
func execRequest(d *descriptor.Request) *coilyv1.ExecRequest {
	req := &coilyv1.ExecRequest{Argv: d.Argv, Env: d.Env, Cwd: d.Cwd, Stdin: d.Stdin, Note: d.Note}
	if d.Timeout > 0 {
		req.Timeout = durationpb.New(d.Timeout)
	}
	return req
}

// RelayTeardown cancels a relayed request in flight, whatever step it is
// at (docs/protocol.md §5), or records a teardown that came first.
func (s *Server) RelayTeardown(ctx context.Context, req *coilyv1.RelayTeardownRequest) (*coilyv1.RelayTeardownResponse, error) {
	bridge, err := access.CallerFrom(ctx)
	if err != nil {
		return nil, err
	}
	sandbox := req.GetSandbox()
	if err := s.mayRelay(ctx, bridge, sandbox, "relay.teardown"); err != nil {
		return nil, err
	}
	cancelled, err := s.relay.Teardown(sandbox, req.GetId(), req.GetTeardown())
	if err != nil {
		return nil, s.refuseControl(ctx, bridge, "relay.teardown", err)
	}
	rec := access.CallerRecord(bridge, coilyv1grpc.CoilyService_RelayTeardown_FullMethodName, "relay.teardown", "")
	rec.RelayID = req.GetId()
	rec.Details = map[string]string{"sandbox": sandbox, "cancelled": fmt.Sprint(cancelled)}
	if err := s.recordControl(ctx, rec, "allow", nil); err != nil {
		return nil, err
	}
	return &coilyv1.RelayTeardownResponse{Cancelled: cancelled}, nil
}
