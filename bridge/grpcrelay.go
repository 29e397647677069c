package bridge

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	coilyv1 "coily.dev/coily/proto/coily/v1"
	"coily.dev/coily/refusal"
)

// RelayAPI is the two calls a bridge relays through (client.API has them).
// Relay's answer must be allowed the size of the largest response file
// (descriptor.MaxResponseSize), over gRPC's default limit of 4 MiB, as
// client.API's is.
type RelayAPI interface {
	Relay(ctx context.Context, in *coilyv1.RelayRequest) (*coilyv1.RelayResponse, error)
	RelayTeardown(ctx context.Context, in *coilyv1.RelayTeardownRequest) (*coilyv1.RelayTeardownResponse, error)
}

// NewGRPCRelayer returns a Relayer that relays through a connection's
// Relay and RelayTeardown RPCs.
//
// A failure to reach the server (gRPC Unavailable, DeadlineExceeded or
// Canceled, the context ending, or an error that is not a gRPC status) is
// transient: the bridge keeps the file and retries. Any other status is the
// server's definitive word and becomes a *Refusal with its refusal
// code (refusal.FromStatus).
func NewGRPCRelayer(api RelayAPI) Relayer { return relayer{api: api} }

type relayer struct {
	api RelayAPI
}

func (r relayer) Relay(ctx context.Context, sandbox, id string, request []byte) ([]byte, error) {
	resp, err := r.api.Relay(ctx, &coilyv1.RelayRequest{Sandbox: sandbox, Id: id, Request: request})
	if err != nil {
		return nil, relayError(ctx, err)
	}
	if resp.GetDuplicate() {
		return nil, &Refusal{Code: string(refusal.ReplayDetected), Held: true,
			Message: "request id already used for a different request"}
	}
	if len(resp.GetResponse()) == 0 {
		return nil, &Refusal{Code: string(refusal.Internal), Message: "the server sent an empty response"}
	}
	return resp.GetResponse(), nil
}

func (r relayer) Teardown(ctx context.Context, sandbox, id string, teardown []byte) error {
	_, err := r.api.RelayTeardown(ctx, &coilyv1.RelayTeardownRequest{Sandbox: sandbox, Id: id, Teardown: teardown})
	if err != nil {
		return relayError(ctx, err)
	}
	return nil
}

// relayError sorts a failed relay into transient (returned as is) and
// definitive (a *Refusal).
func relayError(ctx context.Context, err error) error {
	if ctx.Err() != nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	switch st.Code() {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled:
		return err
	}
	r := refusal.FromStatus(err)
	return &Refusal{Code: string(r.Code), Message: r.Msg, AuditID: r.AuditID}
}
