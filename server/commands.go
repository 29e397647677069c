package server

import (
	"context"
	"maps"
	"slices"

	"google.golang.org/protobuf/types/known/durationpb"

	"coily.dev/coily/access"
	"coily.dev/coily/audit/witness"
	"coily.dev/coily/policy"
	coilyv1 "coily.dev/coily/proto/coily/v1"
	"coily.dev/coily/refusal"
	"coily.dev/coily/wire"
)

// ListCommands lists the caller's rules in force and the deny rules for the
// same commands (for `coily agents-md`): nothing a caller could not learn
// by trying (no credential reference, workspace path or other's rule).
func (s *Server) ListCommands(ctx context.Context, req *coilyv1.ListCommandsRequest) (*coilyv1.ListCommandsResponse, error) {
	c, err := access.CallerFrom(ctx)
	if err != nil {
		return nil, err
	}
	pol := s.policyFrom(ctx)
	subject := c.Subject()
	if p := req.GetPrincipal(); p != "" && p != c.Principal {
		if !pol.Allows(subject, policy.PermApprove) {
			return nil, refusal.New(refusal.PermissionDenied, "listing another principal's commands needs the approve permission")
		}
		if err := wire.CheckText("principal", p); err != nil {
			return nil, err
		}
		subject = policy.Subject{Principal: p}
	}
	allow, deny := pol.Usable(subject)
	out := &coilyv1.ListCommandsResponse{PolicySha256: pol.SHA256, RefusedForms: policy.RefusedForms()}
	for _, r := range allow {
		out.Commands = append(out.Commands, commandRule(r))
	}
	for _, r := range deny {
		out.Denied = append(out.Denied, commandRule(r))
	}
	return out, nil
}

// AuditCheckpoint answers the log's latest checkpoint to a witness that pulls it (witness.AnswerPull).
func (s *Server) AuditCheckpoint(_ context.Context, req *coilyv1.AuditCheckpointRequest) (*coilyv1.AuditCheckpointResponse, error) {
	return witness.AnswerPull(s.cfg.Audit.Dir(), req)
}

// commandRule describes a rule for its callers.
func commandRule(r *policy.Rule) *coilyv1.CommandRule {
	cr := &coilyv1.CommandRule{Rule: r.Name, Command: r.Command(), Binary: r.Binary, Args: r.Args.Args,
		Reason: r.Reason, Present: r.Resolved != ""}
	if r.Effect == policy.Deny {
		return cr
	}
	if r.Args.AnyFlags {
		cr.Flags = []string{"any"}
	} else {
		cr.Flags = slices.Sorted(maps.Keys(r.Args.Flags))
	}
	cr.Env, cr.PassEnv, cr.Writable, cr.Confirm, cr.Network = r.Env, r.PassEnv, r.Writable, r.Confirm, r.Network
	cr.Timeout = durationpb.New(r.Timeout)
	if r.Confirm {
		cr.ConfirmTimeout = durationpb.New(r.ConfirmTimeout)
	}
	if r.Rate != nil {
		cr.RatePerMinute = int32(r.Rate.PerMinute)
	}
	if r.Network == policy.NetworkProxied {
		cr.EgressMode = policy.EgressEnforce
		if r.Egress != nil {
			cr.EgressMode = r.Egress.Mode
		}
		for _, hp := range r.Egress.Effective() {
			cr.EgressHosts = append(cr.EgressHosts, hp.String())
		}
	}
	return cr
}
