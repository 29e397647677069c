package server

import (
	"context"
	"time"

	"google.golang.org/grpc"

	"coily.dev/coily/access"
	"coily.dev/coily/policy"
	"coily.dev/coily/refusal"
	"coily.dev/coily/wire"
)

// policyFrom returns the policy the call was admitted under (the policy in
// force when none was recorded).
func (s *Server) policyFrom(ctx context.Context) *policy.Policy {
	if pol := access.PolicyFrom(ctx); pol != nil {
		return pol
	}
	return s.Policy()
}

// The interceptors admit every call (package access: identity, the
// authorization table, the lockout, the audited refusal) before its
// handler runs, and validate every message it receives.
func (s *Server) unaryInterceptor(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	start := time.Now()
	ctx, err := s.gate.Admit(ctx, access.Call(info.FullMethod))
	if err == nil {
		if verr := wire.CheckMessage(req); verr != nil {
			c, _ := access.CallerFrom(ctx)
			err = s.gate.Refuse(ctx, c, info.FullMethod, verr)
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
	ctx, err := s.gate.Admit(ss.Context(), access.Call(info.FullMethod))
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
	if err := wire.CheckMessage(m); err != nil {
		caller, _ := access.CallerFrom(c.ctx)
		return c.s.gate.Refuse(c.ctx, caller, c.method, err)
	}
	return nil
}
