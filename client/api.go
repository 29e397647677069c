package client

import (
	"context"
	"errors"
	"io"

	"connectrpc.com/connect"

	coilyv1 "coily.dev/coily/proto/coily/v1"
	"coily.dev/coily/proto/coily/v1/coilyv1connect"
)

// API is the coily service's calls (proto/coily/v1/service.proto): the
// stubs connect-go's generator made (coilyv1connect), speaking gRPC, so
// the client links no grpc-go. Their errors are gRPC status errors
// (statusError), and the two streaming calls return a Stream. A test
// checks that it has every method of the service, with the service's
// types.
type API struct {
	coilyv1connect.CoilyServiceClient
	// relay is the same calls with the larger bound on one answer that
	// Relay needs (MaxRelayAnswer).
	relay coilyv1connect.CoilyServiceClient
	// servers, when there are several, are the calls on each (failover).
	servers *servers
}

func newAPI(c *Conn) API {
	return API{CoilyServiceClient: c.service(DefaultMaxRecvSize), relay: c.service(MaxRelayAnswer)}
}

// service is the coily service's stubs over c, each answer bounded by
// maxRecv.
func (c *Conn) service(maxRecv int) coilyv1connect.CoilyServiceClient {
	opts := append(options(maxRecv), connect.WithInterceptors(statusInterceptor{}))
	return coilyv1connect.NewCoilyServiceClient(c.http, c.base, opts...)
}

// newFailoverAPI is the coily service over several servers (failover).
func newFailoverAPI(s *servers) API {
	f := failover{s}
	return API{CoilyServiceClient: f, relay: f, servers: s}
}

// Exec runs one command; see the service's documentation.
func (a API) Exec(ctx context.Context, in *coilyv1.ExecRequest) (*Stream[coilyv1.ExecResponse], error) {
	if a.servers != nil {
		return open(a.servers, notStarted, func(i int) (*connect.ServerStreamForClient[coilyv1.ExecResponse], error) {
			return a.servers.stubs[i].Exec(ctx, in)
		})
	}
	return stream(a.CoilyServiceClient.Exec(ctx, in))
}

// WatchApprovals streams the pending approvals, then every change.
func (a API) WatchApprovals(ctx context.Context, in *coilyv1.WatchApprovalsRequest) (*Stream[coilyv1.WatchApprovalsResponse], error) {
	if a.servers != nil {
		return open(a.servers, idempotent, func(i int) (*connect.ServerStreamForClient[coilyv1.WatchApprovalsResponse], error) {
			return a.servers.stubs[i].WatchApprovals(ctx, in)
		})
	}
	return stream(a.CoilyServiceClient.WatchApprovals(ctx, in))
}

// Relay runs a signed request descriptor a bridge relays; its answer may
// be as large as MaxRelayAnswer.
func (a API) Relay(ctx context.Context, in *coilyv1.RelayRequest) (*coilyv1.RelayResponse, error) {
	return a.relay.Relay(ctx, in)
}

// Stream is the answers of a server-streaming call: Recv returns io.EOF
// after the last when the call ended well, else the call's status.
type Stream[T any] struct {
	s      *connect.ServerStreamForClient[T]
	peeked bool // the first answer was read before the stream was handed out (open)
}

func stream[T any](s *connect.ServerStreamForClient[T], err error) (*Stream[T], error) {
	if err != nil {
		return nil, err
	}
	return &Stream[T]{s: s}, nil
}

// Recv returns the next answer.
func (s *Stream[T]) Recv() (*T, error) {
	if s.peeked {
		s.peeked = false
		return s.s.Msg(), nil
	}
	if s.s.Receive() {
		return s.s.Msg(), nil
	}
	if err := s.s.Err(); err != nil {
		return nil, err
	}
	return nil, io.EOF
}

// Close cancels the call if it still runs.
func (s *Stream[T]) Close() { _ = s.s.Close() }

// statusInterceptor makes every error of a call a gRPC status error
// (statusError).
type statusInterceptor struct{}

func (statusInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		resp, err := next(ctx, req)
		return resp, statusError(ctx, err)
	}
}

func (statusInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		return statusConn{StreamingClientConn: next(ctx, spec), ctx: ctx}
	}
}

func (statusInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

// statusConn is a streaming call whose errors are gRPC status errors; the
// stream's clean end (io.EOF) stays as it is.
type statusConn struct {
	connect.StreamingClientConn
	ctx context.Context
}

func (c statusConn) Send(m any) error    { return keepEOF(c.ctx, c.StreamingClientConn.Send(m)) }
func (c statusConn) Receive(m any) error { return keepEOF(c.ctx, c.StreamingClientConn.Receive(m)) }

func keepEOF(ctx context.Context, err error) error {
	if errors.Is(err, io.EOF) {
		return err
	}
	return statusError(ctx, err)
}
