package server

import (
	"context"
	"net/http"
	"slices"
	"time"

	"coily.dev/coily/access"
	"coily.dev/coily/approvals"
	"coily.dev/coily/httpserve"
	"coily.dev/coily/policy"
	coilyv1 "coily.dev/coily/proto/coily/v1"
	"coily.dev/coily/refusal"
	"coily.dev/coily/webapi"
)

// The web console (package console) reaches the server through the Web
// methods in this file (webapi.Server), never around them. Each one:
//
//   - is admitted by access (Gate.Admit, access.Web): the HTTP request's
//     caller is identified exactly as a gRPC call on the tailnet is
//     identified: WhoIs on the request's remote address (the same cache,
//     the same refusals: no tailnet address, no identity, Funnel, reserved
//     names), never a header, cookie or token; the action is authorized
//     against the one authorization table (an action with a gRPC twin by
//     that method's entry, the console's own by theirs; default deny); a
//     lockout refuses what it refuses over gRPC; a refusal is audited
//     where it is decided;
//   - then runs the twin's own handler, which audits the action as it
//     does for gRPC, with the transport "web".

var _ webapi.Server = (*Server)(nil)

// The audit's method names of the console's refusals that are no action
// of the table ("web:" is no gRPC method's form, so none can be mistaken
// for one).
const (
	// webMethodGuard names the refusals of the console's request guard
	// (WebRefuse): a request from another origin, or for another host.
	webMethodGuard = "web:guard"
	// webMethodConn names the refusals of a connection past its peer's
	// cap (WebHTTPServer).
	webMethodConn = "web:connection"
)

// webCall admits r for a, runs do with the admitted context, and logs a
// failure's detail as the interceptor does; the error returned is a
// refusal (refusal.As) with a caller-safe message.
func (s *Server) webCall(r *http.Request, a access.WebAction, do func(ctx context.Context) error) error {
	start := time.Now()
	ctx, err := s.gate.Admit(r.Context(), access.Web(r.RemoteAddr, a))
	if err == nil {
		err = do(ctx)
	}
	if err == nil {
		return nil
	}
	re := refusal.As(err)
	if re.Detail != nil {
		s.log.Warn("web call failed", "action", string(a), "code", re.Code, "msg", re.Msg, "detail", re.Detail,
			"duration", time.Since(start))
	}
	return re
}

// WebAdmit identifies and authorizes r for a without doing anything else
// (pages, and a stream's periodic re-check: a revoked grant ends it). A
// refusal is audited.
func (s *Server) WebAdmit(r *http.Request, a access.WebAction) error {
	return s.webCall(r, a, func(context.Context) error { return nil })
}

// WebWhoAmI identifies the caller (any caller holding a permission, as
// for a page): the pages show only what its permissions allow, and ask
// for nothing else, so a caller is not refused, and audited, in a loop.
func (s *Server) WebWhoAmI(r *http.Request) (webapi.Caller, error) {
	var out webapi.Caller
	err := s.webCall(r, access.WebPage, func(ctx context.Context) error {
		c, err := access.CallerFrom(ctx)
		if err != nil {
			return err
		}
		pol := s.policyFrom(ctx)
		out = webapi.Caller{Principal: c.Principal, Peer: c.Peer, Roles: pol.Roles(c.Subject()), Permissions: pol.Permissions(c.Subject())}
		return nil
	})
	return out, err
}

// WebStatus answers as Status does, with the Execs in flight.
func (s *Server) WebStatus(r *http.Request) (*webapi.StatusView, error) {
	var v webapi.StatusView
	err := s.webCall(r, access.WebStatus, func(ctx context.Context) error {
		st, err := s.Status(ctx, &coilyv1.StatusRequest{})
		if err != nil {
			return err
		}
		v.Status = st
		if slices.Contains(st.GetCaller().GetPermissions(), string(policy.PermStatus)) {
			v.Execs, v.ExecsShown = s.inFlight(), true
		}
		return nil
	})
	return &v, err
}

// WebApprovals lists the pending approvals with the rules that asked for
// them, as ListApprovals does.
func (s *Server) WebApprovals(r *http.Request) ([]approvals.Pending, error) {
	var out []approvals.Pending
	err := s.webCall(r, access.WebApprovals, func(ctx context.Context) error {
		_, err := access.CallerFrom(ctx)
		if err == nil { // one read: on etcd, ListApprovals and Detailed each read every host's
			out, err = s.approvals.Detailed(ctx)
		}
		return err
	})
	return out, err
}

// WebDecide approves or denies a pending approval, as Decide does.
func (s *Server) WebDecide(r *http.Request, id string, approve bool, note string) (*coilyv1.Approval, error) {
	v := coilyv1.Verdict_VERDICT_DENY
	if approve {
		v = coilyv1.Verdict_VERDICT_APPROVE
	}
	var a *coilyv1.Approval
	err := s.webCall(r, access.WebDecide, func(ctx context.Context) error {
		resp, err := s.Decide(ctx, &coilyv1.DecideRequest{Id: id, Verdict: v, Note: note})
		a = resp.GetApproval()
		return err
	})
	return a, err
}

// WebLockout locks out, as Lockout does.
func (s *Server) WebLockout(r *http.Request, reason string) (*coilyv1.LockoutResponse, error) {
	var out *coilyv1.LockoutResponse
	err := s.webCall(r, access.WebLockout, func(ctx context.Context) (err error) {
		out, err = s.Lockout(ctx, &coilyv1.LockoutRequest{Reason: reason})
		return err
	})
	return out, err
}

// WebPause pauses, as Pause does.
func (s *Server) WebPause(r *http.Request, reason string) (*coilyv1.PauseResponse, error) {
	var out *coilyv1.PauseResponse
	err := s.webCall(r, access.WebPause, func(ctx context.Context) (err error) {
		out, err = s.Pause(ctx, &coilyv1.PauseRequest{Reason: reason})
		return err
	})
	return out, err
}

// WebResume resumes, as Resume does.
func (s *Server) WebResume(r *http.Request, reason string) (*coilyv1.ResumeResponse, error) {
	var out *coilyv1.ResumeResponse
	err := s.webCall(r, access.WebResume, func(ctx context.Context) (err error) {
		out, err = s.Resume(ctx, &coilyv1.ResumeRequest{Reason: reason})
		return err
	})
	return out, err
}

// WebKill kills one command in flight by its request id (killExec),
// audited as event exec.kill. It reports whether the command was running
// (false: it had not started, and never will).
func (s *Server) WebKill(r *http.Request, requestID, reason string) (bool, error) {
	var running bool
	err := s.webCall(r, access.WebKill, func(ctx context.Context) error {
		c, err := access.CallerFrom(ctx)
		if err != nil {
			return err
		}
		running, err = s.killExec(ctx, c, access.WebMethodKill, requestID, reason)
		return err
	})
	return running, err
}

// WebAudit subscribes to the audit log: the last backlog records (at
// most webapi.MaxAuditBacklog), then every record as it is appended.
func (s *Server) WebAudit(r *http.Request, backlog int) (*webapi.AuditStream, error) {
	var st webapi.AuditStream
	err := s.webCall(r, access.WebAudit, func(context.Context) error {
		live, cancel := s.recorder.Subscribe()
		recs, err := s.cfg.Audit.Tail(min(max(backlog, 0), webapi.MaxAuditBacklog))
		if err != nil {
			cancel()
			return refusal.Wrap(refusal.Internal, err, "audit log unreadable")
		}
		st = webapi.AuditStream{Backlog: recs, Live: live, Close: cancel}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &st, nil
}

// WebWatchApprovals subscribes to the approvals, as WatchApprovals does.
func (s *Server) WebWatchApprovals(r *http.Request) (*webapi.ApprovalWatch, error) {
	var w webapi.ApprovalWatch
	err := s.webCall(r, access.WebWatchApprovals, func(context.Context) error {
		ch, cancel := s.approvals.Watch()
		w = webapi.ApprovalWatch{Changes: ch, Done: s.quit, Close: cancel}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &w, nil
}

// WebHTTPServer is an HTTP server for h (the console, or its redirect to
// HTTPS) on the tailnet node, under lim (zero fields:
// httpserve.DefaultWebLimits): each peer's connections are capped, and a
// refusal is audited as web:connection.
func (s *Server) WebHTTPServer(h http.Handler, lim httpserve.Limits) *httpserve.Server {
	return httpserve.New(h, lim.Or(httpserve.DefaultWebLimits), s.connCap(access.TransportWeb, webMethodConn))
}

// connCap counts and audits an HTTP server's connections past their
// peer's cap as method over transport: the first of a window refused
// through the gate, the rest counted and summarised.
func (s *Server) connCap(transport, method string) *httpserve.Cap {
	return &httpserve.Cap{Transport: transport, Method: method, Gate: s.gate, Audit: s.recorder,
		Refused: func(code string) { s.metrics.Refused(code) }, Now: func() time.Time { return s.cfg.Now() }, Log: s.log}
}

// WebRefuse audits a console request its guard refused before any action
// (another origin, another host: a forged request from the caller's own
// browser is worth a record), identifying the caller if it can, and
// returns the refusal (permission-denied with msg).
func (s *Server) WebRefuse(r *http.Request, msg string) error {
	c, err := s.gate.Tailnet(r.Context(), r.RemoteAddr)
	c.Transport = access.TransportWeb
	if err == nil {
		err = refusal.New(refusal.PermissionDenied, "%s", msg)
	}
	return s.gate.Refuse(r.Context(), c, webMethodGuard, err)
}
