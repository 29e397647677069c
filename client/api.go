package client

import (
	"context"

	"google.golang.org/protobuf/proto"

	"coily.dev/coily/client/grpclite"
	coilyv1 "coily.dev/coily/proto/coily/v1"
)

// servicePrefix begins every method's full name (proto/coily/v1/service.proto).
const servicePrefix = "/coily.v1.CoilyService/"

// API is the coily service's calls (proto/coily/v1/service.proto), made
// over grpclite rather than grpc-go's generated client, so the client
// does not link grpc-go. A test checks that it has every method of the
// service, with the service's types.
type API struct{ conn *grpclite.Conn }

// Stream is the answers of a server-streaming call: Recv returns io.EOF
// after the last when the call ended well, else the call's status.
type Stream[T any] struct{ s *grpclite.Stream }

// Recv returns the next answer.
func (s *Stream[T]) Recv() (*T, error) {
	m := new(T)
	if err := s.s.RecvMsg(any(m).(proto.Message)); err != nil {
		return nil, err
	}
	return m, nil
}

// Close cancels the call if it still runs.
func (s *Stream[T]) Close() { s.s.Close() }

func unary[T any](ctx context.Context, a API, method string, in proto.Message, opts ...grpclite.CallOption) (*T, error) {
	out := new(T)
	if err := a.conn.Invoke(ctx, servicePrefix+method, in, any(out).(proto.Message), opts...); err != nil {
		return nil, err
	}
	return out, nil
}

func stream[T any](ctx context.Context, a API, method string, in proto.Message) (*Stream[T], error) {
	s, err := a.conn.NewStream(ctx, servicePrefix+method, in)
	if err != nil {
		return nil, err
	}
	return &Stream[T]{s: s}, nil
}

// Exec runs one command; see the service's documentation.
func (a API) Exec(ctx context.Context, in *coilyv1.ExecRequest) (*Stream[coilyv1.ExecResponse], error) {
	return stream[coilyv1.ExecResponse](ctx, a, "Exec", in)
}

// Lockout stops everything until Unlock.
func (a API) Lockout(ctx context.Context, in *coilyv1.LockoutRequest) (*coilyv1.LockoutResponse, error) {
	return unary[coilyv1.LockoutResponse](ctx, a, "Lockout", in)
}

// Unlock lifts a lockout.
func (a API) Unlock(ctx context.Context, in *coilyv1.UnlockRequest) (*coilyv1.UnlockResponse, error) {
	return unary[coilyv1.UnlockResponse](ctx, a, "Unlock", in)
}

// Pause refuses new Execs (the caller's own, without the pause permission).
func (a API) Pause(ctx context.Context, in *coilyv1.PauseRequest) (*coilyv1.PauseResponse, error) {
	return unary[coilyv1.PauseResponse](ctx, a, "Pause", in)
}

// Resume lifts a pause.
func (a API) Resume(ctx context.Context, in *coilyv1.ResumeRequest) (*coilyv1.ResumeResponse, error) {
	return unary[coilyv1.ResumeResponse](ctx, a, "Resume", in)
}

// Status reports the stop state, the caller's identity and what runs.
func (a API) Status(ctx context.Context, in *coilyv1.StatusRequest) (*coilyv1.StatusResponse, error) {
	return unary[coilyv1.StatusResponse](ctx, a, "Status", in)
}

// ListApprovals lists the approvals waiting for a decision.
func (a API) ListApprovals(ctx context.Context, in *coilyv1.ListApprovalsRequest) (*coilyv1.ListApprovalsResponse, error) {
	return unary[coilyv1.ListApprovalsResponse](ctx, a, "ListApprovals", in)
}

// WatchApprovals streams the pending approvals, then every change.
func (a API) WatchApprovals(ctx context.Context, in *coilyv1.WatchApprovalsRequest) (*Stream[coilyv1.WatchApprovalsResponse], error) {
	return stream[coilyv1.WatchApprovalsResponse](ctx, a, "WatchApprovals", in)
}

// Decide approves or denies a pending approval.
func (a API) Decide(ctx context.Context, in *coilyv1.DecideRequest) (*coilyv1.DecideResponse, error) {
	return unary[coilyv1.DecideResponse](ctx, a, "Decide", in)
}

// Relay runs a signed request descriptor a bridge relays; its answer may
// be as large as MaxRelayAnswer.
func (a API) Relay(ctx context.Context, in *coilyv1.RelayRequest) (*coilyv1.RelayResponse, error) {
	return unary[coilyv1.RelayResponse](ctx, a, "Relay", in, grpclite.MaxRecvSize(MaxRelayAnswer))
}

// RelayTeardown cancels a relayed request.
func (a API) RelayTeardown(ctx context.Context, in *coilyv1.RelayTeardownRequest) (*coilyv1.RelayTeardownResponse, error) {
	return unary[coilyv1.RelayTeardownResponse](ctx, a, "RelayTeardown", in)
}

// IssueKey issues the first signing key of a sandbox.
func (a API) IssueKey(ctx context.Context, in *coilyv1.IssueKeyRequest) (*coilyv1.IssueKeyResponse, error) {
	return unary[coilyv1.IssueKeyResponse](ctx, a, "IssueKey", in)
}

// RotateKeys replaces one sandbox's signing key, or every sandbox's.
func (a API) RotateKeys(ctx context.Context, in *coilyv1.RotateKeysRequest) (*coilyv1.RotateKeysResponse, error) {
	return unary[coilyv1.RotateKeysResponse](ctx, a, "RotateKeys", in)
}

// ListCommands lists the command rules the caller may run.
func (a API) ListCommands(ctx context.Context, in *coilyv1.ListCommandsRequest) (*coilyv1.ListCommandsResponse, error) {
	return unary[coilyv1.ListCommandsResponse](ctx, a, "ListCommands", in)
}
