package server

import (
	"context"
	"slices"

	"google.golang.org/protobuf/types/known/durationpb"

	"coily.dev/coily/access"
	"coily.dev/coily/policy"
	coilyv1 "coily.dev/coily/proto/coily/v1"
	"coily.dev/coily/refusal"
	"coily.dev/coily/wire"
)

// ListCommands lists the rules the caller may run under the policy in
// force, and the deny rules that speak for the same commands (for `coily
// agents-md`). It says nothing a caller could not learn by trying: no
// credential reference, workspace path or other caller's rule.
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

// commandRule describes a rule for its callers.
func commandRule(r *policy.Rule) *coilyv1.CommandRule {
	cr := &coilyv1.CommandRule{Rule: r.Name, Command: r.Command(), Binary: r.Binary, Args: r.Args.Args,
		Reason: r.Reason, Present: r.Resolved != ""}
	if r.Effect == policy.Deny {
		return cr
	}
	switch {
	case r.Args.AnyFlags:
		cr.Flags = []string{"any"}
	default:
		for name := range r.Args.Flags {
			cr.Flags = append(cr.Flags, name)
		}
		slices.Sort(cr.Flags)
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
