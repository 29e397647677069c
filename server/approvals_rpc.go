package server

import (
	"context"

	"google.golang.org/grpc"

	"coily.dev/coily/access"
	coilyv1 "coily.dev/coily/proto/coily/v1"
	coilyv1grpc "coily.dev/coily/proto/coily/v1/coilyv1grpc"
	"coily.dev/coily/refusal"
	"coily.dev/coily/wire"
)

// ListApprovals lists the pending approvals.
func (s *Server) ListApprovals(ctx context.Context, _ *coilyv1.ListApprovalsRequest) (*coilyv1.ListApprovalsResponse, error) {
	if _, err := access.CallerFrom(ctx); err != nil {
		return nil, err
	}
	list, err := s.approvals.List(ctx)
	return &coilyv1.ListApprovalsResponse{Approvals: list}, err
}

// WatchApprovals streams the pending approvals, then every change, until
// the caller goes away, the server shuts down, or the watcher falls too far
// behind (it is then cut off and should reconnect).
func (s *Server) WatchApprovals(_ *coilyv1.WatchApprovalsRequest, stream grpc.ServerStreamingServer[coilyv1.WatchApprovalsResponse]) error {
	ctx := stream.Context()
	if _, err := access.CallerFrom(ctx); err != nil {
		return err
	}
	ch, cancel := s.approvals.Watch()
	defer cancel()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-s.quit:
			return refusal.New(refusal.Internal, "server is shutting down")
		case a, ok := <-ch:
			if !ok {
				return refusal.New(refusal.Internal, "watcher fell behind; reconnect")
			}
			if err := stream.Send(&coilyv1.WatchApprovalsResponse{Approval: a}); err != nil {
				return err
			}
		}
	}
}

// Decide approves or denies a pending approval and audits the decision
// with both the approver's and the requester's identity.
func (s *Server) Decide(ctx context.Context, req *coilyv1.DecideRequest) (*coilyv1.DecideResponse, error) {
	c, err := access.CallerFrom(ctx)
	if err != nil {
		return nil, err
	}
	rec := access.CallerRecord(c, coilyv1grpc.CoilyService_Decide_FullMethodName, "approval.decide", req.GetNote())
	rec.Details = map[string]string{"approval_id": req.GetId(), "verdict": req.GetVerdict().String()}
	a, err := s.decide(c, req)
	if a != nil {
		rec.RequestID, rec.Argv, rec.Rule = a.GetRequestId(), a.GetArgv(), a.GetRule()
		rec.Details["requester"] = a.GetRequester()
	}
	rec.Decision = "allow"
	if err != nil {
		r := refusal.As(err)
		rec.Decision, rec.Code, rec.Reason = "refuse", string(r.Code), r.Msg
	}
	out, aerr := s.record(ctx, rec)
	if aerr != nil {
		return nil, refusal.Wrap(refusal.Internal, aerr, "audit log unavailable")
	}
	if err != nil {
		return nil, refusal.WithAudit(err, out.ID)
	}
	return &coilyv1.DecideResponse{Approval: a}, nil
}

func (s *Server) decide(c access.Caller, req *coilyv1.DecideRequest) (*coilyv1.Approval, error) {
	if req.GetVerdict() == coilyv1.Verdict_VERDICT_UNSPECIFIED {
		return nil, refusal.New(refusal.BadRequest, "verdict must be approve or deny")
	}
	if err := wire.CheckText("note", req.GetNote()); err != nil {
		return nil, err
	}
	if len(req.GetId()) > 64 {
		return nil, refusal.New(refusal.BadRequest, "approval id too long")
	}
	return s.approvals.Decide(req.GetId(), c.Principal, req.GetVerdict(), req.GetNote())
}
