package server

import (
	"context"
	"slices"
	"time"

	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionv1 "google.golang.org/grpc/reflection/grpc_reflection_v1"
	reflectionv1alpha "google.golang.org/grpc/reflection/grpc_reflection_v1alpha"

	"coily.dev/coily/policy"
	coilyv1grpc "coily.dev/coily/proto/coily/v1/coilyv1grpc"
	"coily.dev/coily/refusal"
)

// anyPermission marks methods open to every caller that holds at least one
// permission (health and reflection): a caller with no grant at all is
// refused everywhere.
const anyPermission policy.Permission = "*"

// methodPermissions is the per-RPC authorization table: a caller needs any
// one of the listed permissions. A method absent from the table is refused.
var methodPermissions = map[string][]policy.Permission{
	coilyv1grpc.CoilyService_Exec_FullMethodName:    {policy.PermExec},
	coilyv1grpc.CoilyService_Lockout_FullMethodName: {policy.PermLockout},
	coilyv1grpc.CoilyService_Unlock_FullMethodName:  {policy.PermUnlock},
	// Any caller allowed to exec may pause itself (its own new commands:
	// see Server.Pause); the pause permission pauses the server.
	coilyv1grpc.CoilyService_Pause_FullMethodName:  {policy.PermPause, policy.PermExec},
	coilyv1grpc.CoilyService_Resume_FullMethodName: {policy.PermResume},
	coilyv1grpc.CoilyService_Status_FullMethodName: {policy.PermStatus, policy.PermExec},
	// A caller allowed to exec may see what it may run.
	coilyv1grpc.CoilyService_ListCommands_FullMethodName: {policy.PermExec},

	coilyv1grpc.CoilyService_ListApprovals_FullMethodName:  {policy.PermApprove},
	coilyv1grpc.CoilyService_WatchApprovals_FullMethodName: {policy.PermApprove},
	coilyv1grpc.CoilyService_Decide_FullMethodName:         {policy.PermApprove},

	// Relaying also needs the sandbox in the role's list, checked per call.
	coilyv1grpc.CoilyService_Relay_FullMethodName:         {policy.PermRelay},
	coilyv1grpc.CoilyService_RelayTeardown_FullMethodName: {policy.PermRelay},
	coilyv1grpc.CoilyService_IssueKey_FullMethodName:      {policy.PermKeys},
	coilyv1grpc.CoilyService_RotateKeys_FullMethodName:    {policy.PermKeys},

	healthpb.Health_Check_FullMethodName: {anyPermission},
	healthpb.Health_Watch_FullMethodName: {anyPermission},
	healthpb.Health_List_FullMethodName:  {anyPermission},

	reflectionv1.ServerReflection_ServerReflectionInfo_FullMethodName:      {anyPermission},
	reflectionv1alpha.ServerReflection_ServerReflectionInfo_FullMethodName: {anyPermission},
}

// servedWhileLocked are the methods a lockout leaves open: seeing the state,
// locking again, unlocking, health and reflection. Everything else is
// refused with lockout-active.
var servedWhileLocked = map[string]bool{
	coilyv1grpc.CoilyService_Status_FullMethodName:  true,
	coilyv1grpc.CoilyService_Lockout_FullMethodName: true,
	coilyv1grpc.CoilyService_Unlock_FullMethodName:  true,

	healthpb.Health_Check_FullMethodName: true,
	healthpb.Health_Watch_FullMethodName: true,
	healthpb.Health_List_FullMethodName:  true,

	reflectionv1.ServerReflection_ServerReflectionInfo_FullMethodName:      true,
	reflectionv1alpha.ServerReflection_ServerReflectionInfo_FullMethodName: true,
}

// authorize checks the caller against the table, under pol.
func (s *Server) authorize(c Caller, method string, pol *policy.Policy) error {
	need, ok := methodPermissions[method]
	if !ok {
		return refusal.New(refusal.PermissionDenied, "method %s is not served", method)
	}
	return authorizeNeed(c, method, need, pol)
}

// authorizeNeed checks that the caller holds one of the permissions need
// lists for method.
func authorizeNeed(c Caller, method string, need []policy.Permission, pol *policy.Policy) error {
	have := pol.Permissions(c.Subject())
	for _, p := range need {
		if (p == anyPermission && len(have) > 0) || slices.Contains(have, p) {
			return nil
		}
	}
	return refusal.New(refusal.PermissionDenied, "%s may not call %s", c.Principal, shortMethod(method))
}

// admitCall identifies and authorizes one call. Refusals are audited here,
// where they are decided.
func (s *Server) admitCall(ctx context.Context, method string) (context.Context, error) {
	pol := s.Policy() // one policy for the whole call
	c, err := s.identify(ctx, pol)
	if err == nil {
		err = s.authorize(c, method, pol)
	}
	if err == nil && !servedWhileLocked[method] && method != coilyv1grpc.CoilyService_Exec_FullMethodName {
		// Exec checks the lockout itself, atomically with admission.
		err = s.checkLockout()
	}
	if err != nil {
		return nil, s.refuseCall(ctx, c, method, err)
	}
	return withCall(ctx, c, pol), nil
}

// refuseCall audits a call refused before its handler ran.
func (s *Server) refuseCall(ctx context.Context, c Caller, method string, err error) error {
	r := refusal.As(err)
	rec := callerRecord(c, method, "call", r.Msg)
	rec.Decision, rec.Code = "refuse", string(r.Code)
	out, auditErr := s.record(ctx, rec)
	if auditErr != nil {
		return refusal.Wrap(refusal.Internal, auditErr, "audit log unavailable")
	}
	return refusal.WithAudit(err, out.ID)
}

func (s *Server) unaryInterceptor(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	start := time.Now()
	ctx, err := s.admitCall(ctx, info.FullMethod)
	if err == nil {
		if verr := validateMessage(req); verr != nil {
			c, _ := callerFrom(ctx)
			err = s.refuseCall(ctx, c, info.FullMethod, verr)
		}
	}
	if err == nil {
		var resp any
		resp, err = handler(ctx, req)
		if err == nil {
			return resp, nil
		}
	}
	return nil, s.statusError(info.FullMethod, start, err)
}

func (s *Server) streamInterceptor(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	start := time.Now()
	ctx, err := s.admitCall(ss.Context(), info.FullMethod)
	if err == nil {
		err = handler(srv, &callerStream{ServerStream: ss, ctx: ctx, s: s, method: info.FullMethod})
		if err == nil {
			return nil
		}
	}
	return s.statusError(info.FullMethod, start, err)
}

// statusError is the one place an error becomes what the caller sees: the
// refusal code and safe message go out, the detail goes to the log.
func (s *Server) statusError(method string, start time.Time, err error) error {
	r := refusal.As(err)
	if r.Detail != nil {
		s.log.Warn("call failed", "method", method, "code", r.Code, "msg", r.Msg, "detail", r.Detail,
			"duration", time.Since(start))
	}
	return refusal.Status(r).Err()
}

// callerStream carries the identified caller into a streaming handler and
// validates every message it receives.
type callerStream struct {
	grpc.ServerStream
	ctx    context.Context
	s      *Server
	method string
}

func (c *callerStream) Context() context.Context { return c.ctx }

func (c *callerStream) RecvMsg(m any) error {
	if err := c.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	if err := validateMessage(m); err != nil {
		caller, _ := callerFrom(c.ctx)
		return c.s.refuseCall(c.ctx, caller, c.method, err)
	}
	return nil
}

func shortMethod(full string) string {
	for i := len(full) - 1; i >= 0; i-- {
		if full[i] == '/' {
			return full[i+1:]
		}
	}
	return full
}
