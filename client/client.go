// Package client is the Go client of the coily API used by the CLI: it dials
// a transport, runs Exec with output streamed to writers, retries only
// rate-limit refusals, and maps outcomes to process exit codes.
package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"coily.dev/coily/descriptor/layout"
	coilyv1 "coily.dev/coily/proto/coily/v1"
	"coily.dev/coily/refusal"
)

// DefaultPort is the port coily serves gRPC on over the tailnet.
const DefaultPort = 7443

// GitPort is the port the git proxy serves plain HTTP on over the tailnet
// (WireGuard encrypts and authenticates the link): `coily git setup
// --server` writes it, `coily serve` listens on it.
const GitPort = 7444

// RefusedExit is the exit code of a refused or failed call, chosen (as by
// env(1) and timeout(1)) to stay apart from the command's own codes.
const RefusedExit = 125

// MaxRelayAnswer bounds a Relay's answer: a response file of the largest
// size the protocol allows (layout.MaxResponseSize) and the message
// around it. Every other call keeps gRPC's default of 4 MiB.
const MaxRelayAnswer = layout.MaxResponseSize + 64<<10

// Client is a connection to a coily server.
type Client struct {
	conn  *Conn
	conns []*Conn // every server's, with several (NewServers)
	API   API
	// RateLimitRetries bounds how often a rate-limit refusal is retried.
	RateLimitRetries int
	// MaxRetryDelay caps the wait before one retry.
	MaxRetryDelay time.Duration
	// OnApproval, if set, is told when an Exec waits for a human's
	// approval.
	OnApproval func(*coilyv1.Approval)

	cleanup func() // releases what the transport holds (a tsnet node)
}

// DialLocal connects to the server's local operator socket. The connection
// is made lazily; the first call reports an unreachable server.
func DialLocal(socket string) (*Client, error) {
	abs, err := filepath.Abs(socket)
	if err != nil {
		return nil, fmt.Errorf("client: socket path: %w", err)
	}
	var d net.Dialer
	return New(func(ctx context.Context) (net.Conn, error) { return d.DialContext(ctx, "unix", abs) }, "localhost", nil), nil
}

// New returns a client whose connections come from dial (made lazily, at
// the first call); authority is the server's name in each call
// ("localhost" on a unix socket, else host:port); cleanup, if any, runs on
// Close (it releases what the transport holds, such as a tailnet node).
func New(dial func(ctx context.Context) (net.Conn, error), authority string, cleanup func()) *Client {
	conn := newConn(dial, authority)
	return &Client{conn: conn, API: newAPI(conn), RateLimitRetries: RateLimitRetries,
		MaxRetryDelay: MaxRetryDelay, cleanup: cleanup}
}

// NewServers returns a client of several servers, tried in order from
// the last one that answered (kept in the user's cache directory, when
// there is one) and failing over only where that cannot run anything
// twice (failover.go). One target is New's client.
func NewServers(targets []Target, cleanup func()) *Client {
	if len(targets) == 1 {
		return New(targets[0].Dial, targets[0].Name, cleanup)
	}
	s := &servers{sticky: stickyPath(targets)}
	var conns []*Conn
	for _, t := range targets {
		conn := newConn(t.Dial, t.Name)
		conns = append(conns, conn)
		s.names = append(s.names, t.Name)
		s.stubs = append(s.stubs, conn.service(DefaultMaxRecvSize))
		s.relays = append(s.relays, conn.service(MaxRelayAnswer))
	}
	s.cur = loadSticky(s.sticky, s.names)
	return &Client{conn: conns[0], conns: conns, API: newFailoverAPI(s), RateLimitRetries: RateLimitRetries,
		MaxRetryDelay: MaxRetryDelay, cleanup: cleanup}
}

// Conn returns the underlying connection, for calls of other services
// (health, reflection) and of methods by name; with several servers, the
// first's.
func (c *Client) Conn() *Conn { return c.conn }

// Close closes the connections and whatever their transport holds.
func (c *Client) Close() error {
	err := c.conn.Close()
	for _, conn := range c.conns {
		_ = conn.Close()
	}
	if c.cleanup != nil {
		c.cleanup()
	}
	return err
}

// Exec runs a command, copying its output to stdout and stderr as it
// arrives. It returns the exit event, or a *refusal.Error. A rate-limit
// refusal (always before the command starts) is retried after the delay the
// server asks for; every other refusal fails fast.
func (c *Client) Exec(ctx context.Context, req *coilyv1.ExecRequest, stdout, stderr io.Writer) (*coilyv1.ExecExit, error) {
	return RetryRateLimited(ctx, c.RateLimitRetries, FirstBackoff, c.MaxRetryDelay, func() (*coilyv1.ExecExit, error) {
		return c.execOnce(ctx, req, stdout, stderr)
	})
}

func (c *Client) execOnce(ctx context.Context, req *coilyv1.ExecRequest, stdout, stderr io.Writer) (*coilyv1.ExecExit, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // on a local write failure, cancel so the server kills the command
	stream, err := c.API.Exec(ctx, req)
	if err != nil {
		return nil, refusal.FromStatus(err)
	}
	defer stream.Close()
	for {
		msg, err := stream.Recv()
		if err == io.EOF {
			return nil, refusal.New(refusal.Internal, "server ended the stream without an exit status")
		}
		if err != nil {
			return nil, refusal.FromStatus(err)
		}
		switch ev := msg.GetEvent().(type) {
		case *coilyv1.ExecResponse_Output:
			w := stdout
			if ev.Output.GetStream() == coilyv1.Stream_STREAM_STDERR {
				w = stderr
			}
			if _, err := w.Write(ev.Output.GetData()); err != nil {
				return nil, fmt.Errorf("client: write output: %w", err)
			}
		case *coilyv1.ExecResponse_Exit:
			return ev.Exit, nil
		case *coilyv1.ExecResponse_Approval:
			if c.OnApproval != nil {
				c.OnApproval(ev.Approval)
			}
		}
	}
}

// ExitCode maps an exit event to a process exit code the way shells do:
// the command's code, or 128+N when it was killed by signal N.
func ExitCode(exit *coilyv1.ExecExit) int {
	if exit.GetSignal() > 0 {
		return 128 + int(exit.GetSignal())
	}
	return int(exit.GetExitCode())
}

// Unreachable reports whether err means the server could not be reached
// at all (no socket, no route, the tailnet down, a connection cut), as
// opposed to a refusal the server decided: a gRPC Unavailable status
// without coily's ErrorInfo, or an error from before any call.
func Unreachable(err error) bool {
	if err == nil {
		return false
	}
	var r *refusal.Error
	if errors.As(err, &r) {
		// A refusal read from a transport failure keeps that failure as
		// its detail (refusal.FromStatus).
		return r.Code == refusal.Internal && r.Detail != nil && r.Detail != err && Unreachable(r.Detail)
	}
	var d *DialError
	if errors.As(err, &d) {
		return true
	}
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.Unavailable {
		return false
	}
	for _, det := range st.Details() {
		if info, ok := det.(*errdetails.ErrorInfo); ok && info.GetDomain() == refusal.Domain {
			return false
		}
	}
	return true
}

// DialError is a failure to set up the transport itself (join a tailnet,
// find a socket).
type DialError struct{ Err error }

func (e *DialError) Error() string { return e.Err.Error() }
func (e *DialError) Unwrap() error { return e.Err }
