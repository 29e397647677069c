package client

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"

	"connectrpc.com/connect"

	coilyv1 "coily.dev/coily/proto/coily/v1"
	"coily.dev/coily/proto/coily/v1/coilyv1connect"
	"coily.dev/coily/refusal"
)

// Several servers (--server a,b,c) are one trust point to a client: it
// tries them in order, starting from the last one that answered, and goes
// on to the next only where that cannot run anything twice (failsOver).

// Target is one server a client may reach: how to connect to it and its
// name (host:port, the :authority of each call).
type Target struct {
	Dial func(ctx context.Context) (net.Conn, error)
	Name string
}

// rule is which failures of a call let it go on to the next server.
type rule int

const (
	// once: only a failure to connect (nothing was sent). Unlock,
	// Resume, the sandbox keys: a call that acts, and acts differently
	// when repeated.
	once rule = iota
	// notStarted: a failure to connect, or a refusal the server makes
	// before it starts anything (state-unavailable). Exec and Relay.
	// The server's Exec (server/exec.go, execute) reads the shared state
	// in admitState and takeToken, before confirm sends an approval and
	// long before anything runs; a state-unavailable that comes after
	// any answer is not failed over, as open reads the first answer
	// before it chooses.
	notStarted
	// idempotent: also the connection lost or the server unavailable
	// after the call was sent; repeating it elsewhere changes nothing
	// (Status, the lists, Lockout and Pause, where "already" is success,
	// Decide, where a repeat gets "already decided").
	idempotent
)

// failsOver says whether a call under r that failed with err may be made
// on the next server. A stream broken after the start is never resent:
// the caller asks only before the first answer.
func failsOver(r rule, err error) bool {
	if err == nil {
		return false
	}
	var nc *notConnected
	if errors.As(err, &nc) {
		return true
	}
	if r == once {
		return false
	}
	if refusal.FromStatus(err).Code == refusal.StateUnavailable {
		return true
	}
	return r == idempotent && Unreachable(err)
}

// servers are a client's servers in order, and the one that answered
// last.
type servers struct {
	names  []string
	stubs  []coilyv1connect.CoilyServiceClient // gRPC's bound on an answer
	relays []coilyv1connect.CoilyServiceClient // Relay's
	sticky string                              // where the last one that answered is kept ("": nowhere)

	mu  sync.Mutex
	cur int
}

// order is every server's index, from the last one that answered.
func (s *servers) order() []int {
	s.mu.Lock()
	cur := s.cur
	s.mu.Unlock()
	out := make([]int, len(s.names))
	for k := range out {
		out[k] = (cur + k) % len(s.names)
	}
	return out
}

// answered notes that server i answered: the next call starts there.
func (s *servers) answered(i int) {
	s.mu.Lock()
	moved := s.cur != i
	s.cur = i
	s.mu.Unlock()
	if moved {
		saveSticky(s.sticky, s.names[i])
	}
}

// try makes a unary call on each server in turn until one answers or
// fails in a way r does not fail over on.
func try[T any](s *servers, r rule, call func(i int) (T, error)) (T, error) {
	var v T
	var err error
	for _, i := range s.order() {
		v, err = call(i)
		if !failsOver(r, err) {
			s.answered(i)
			return v, err
		}
	}
	return v, err
}

// open opens a server stream on each server in turn, until one sends its
// first answer or fails in a way r does not fail over on: the answer is
// read before the stream is returned, so a stream that has said anything
// is never opened again elsewhere.
func open[T any](s *servers, r rule, call func(i int) (*connect.ServerStreamForClient[T], error)) (*Stream[T], error) {
	var last *Stream[T]
	var lastErr error
	for _, i := range s.order() {
		if last != nil {
			last.Close()
		}
		st, err := stream(call(i))
		if err != nil {
			if failsOver(r, err) {
				last, lastErr = nil, err
				continue
			}
			s.answered(i)
			return nil, err
		}
		if st.s.Receive() {
			st.peeked = true
			s.answered(i)
			return st, nil
		}
		if err := st.s.Err(); failsOver(r, err) {
			last, lastErr = st, err
			continue
		}
		s.answered(i)
		return st, nil // its end, or its error, read again by Recv
	}
	if last != nil {
		return last, nil
	}
	return nil, lastErr
}

// failover is the coily service over several servers: each call with its
// rule.
type failover struct{ s *servers }

func (f failover) Exec(ctx context.Context, in *coilyv1.ExecRequest) (*connect.ServerStreamForClient[coilyv1.ExecResponse], error) {
	return f.s.stubs[f.s.order()[0]].Exec(ctx, in) // API.Exec opens it (open)
}

func (f failover) WatchApprovals(ctx context.Context, in *coilyv1.WatchApprovalsRequest) (*connect.ServerStreamForClient[coilyv1.WatchApprovalsResponse], error) {
	return f.s.stubs[f.s.order()[0]].WatchApprovals(ctx, in) // API.WatchApprovals opens it (open)
}

func (f failover) Lockout(ctx context.Context, in *coilyv1.LockoutRequest) (*coilyv1.LockoutResponse, error) {
	return try(f.s, idempotent, func(i int) (*coilyv1.LockoutResponse, error) { return f.s.stubs[i].Lockout(ctx, in) })
}

func (f failover) Unlock(ctx context.Context, in *coilyv1.UnlockRequest) (*coilyv1.UnlockResponse, error) {
	return try(f.s, once, func(i int) (*coilyv1.UnlockResponse, error) { return f.s.stubs[i].Unlock(ctx, in) })
}

func (f failover) Pause(ctx context.Context, in *coilyv1.PauseRequest) (*coilyv1.PauseResponse, error) {
	return try(f.s, idempotent, func(i int) (*coilyv1.PauseResponse, error) { return f.s.stubs[i].Pause(ctx, in) })
}

func (f failover) Resume(ctx context.Context, in *coilyv1.ResumeRequest) (*coilyv1.ResumeResponse, error) {
	return try(f.s, once, func(i int) (*coilyv1.ResumeResponse, error) { return f.s.stubs[i].Resume(ctx, in) })
}

func (f failover) Status(ctx context.Context, in *coilyv1.StatusRequest) (*coilyv1.StatusResponse, error) {
	return try(f.s, idempotent, func(i int) (*coilyv1.StatusResponse, error) { return f.s.stubs[i].Status(ctx, in) })
}

func (f failover) ListApprovals(ctx context.Context, in *coilyv1.ListApprovalsRequest) (*coilyv1.ListApprovalsResponse, error) {
	return try(f.s, idempotent, func(i int) (*coilyv1.ListApprovalsResponse, error) { return f.s.stubs[i].ListApprovals(ctx, in) })
}

func (f failover) Decide(ctx context.Context, in *coilyv1.DecideRequest) (*coilyv1.DecideResponse, error) {
	return try(f.s, idempotent, func(i int) (*coilyv1.DecideResponse, error) { return f.s.stubs[i].Decide(ctx, in) })
}

func (f failover) Relay(ctx context.Context, in *coilyv1.RelayRequest) (*coilyv1.RelayResponse, error) {
	return try(f.s, notStarted, func(i int) (*coilyv1.RelayResponse, error) {
		r, err := f.s.relays[i].Relay(ctx, in)
		if err == nil {
			tellAnswered(ctx, f.s.names[i])
		}
		return r, err
	})
}

func (f failover) RelayTeardown(ctx context.Context, in *coilyv1.RelayTeardownRequest) (*coilyv1.RelayTeardownResponse, error) {
	return try(f.s, once, func(i int) (*coilyv1.RelayTeardownResponse, error) { return f.s.stubs[i].RelayTeardown(ctx, in) })
}

func (f failover) IssueKey(ctx context.Context, in *coilyv1.IssueKeyRequest) (*coilyv1.IssueKeyResponse, error) {
	return try(f.s, once, func(i int) (*coilyv1.IssueKeyResponse, error) { return f.s.stubs[i].IssueKey(ctx, in) })
}

func (f failover) RotateKeys(ctx context.Context, in *coilyv1.RotateKeysRequest) (*coilyv1.RotateKeysResponse, error) {
	return try(f.s, once, func(i int) (*coilyv1.RotateKeysResponse, error) { return f.s.stubs[i].RotateKeys(ctx, in) })
}

func (f failover) ListCommands(ctx context.Context, in *coilyv1.ListCommandsRequest) (*coilyv1.ListCommandsResponse, error) {
	return try(f.s, idempotent, func(i int) (*coilyv1.ListCommandsResponse, error) { return f.s.stubs[i].ListCommands(ctx, in) })
}

// AuditCheckpoint asks for the checkpoint of the log in.Origin pins: each
// server keeps its own log under its own key, so it asks each server in
// turn until one keeps that log (one that keeps another answers only its
// origin), without moving the server the other calls start from. Without
// an origin, any server's.
func (f failover) AuditCheckpoint(ctx context.Context, in *coilyv1.AuditCheckpointRequest) (*coilyv1.AuditCheckpointResponse, error) {
	if in.GetOrigin() == "" {
		return try(f.s, idempotent, func(i int) (*coilyv1.AuditCheckpointResponse, error) { return f.s.stubs[i].AuditCheckpoint(ctx, in) })
	}
	var down error
	var others []string
	for _, i := range f.s.order() {
		r, err := f.s.stubs[i].AuditCheckpoint(ctx, in)
		switch {
		case failsOver(idempotent, err):
			down = err
		case err != nil:
			return nil, err
		case r.GetLogOrigin() != "" && r.GetLogOrigin() != in.GetOrigin():
			others = append(others, f.s.names[i]+" keeps "+r.GetLogOrigin())
		default:
			tellAnswered(ctx, f.s.names[i])
			return r, nil
		}
	}
	if down != nil {
		return nil, down
	}
	return nil, &NotThisLogError{Origin: in.GetOrigin(), Others: others}
}

// NotThisLogError is every server answering that its audit log is not
// the one asked for: the host that keeps it is not in the list.
type NotThisLogError struct {
	Origin string
	Others []string // "server keeps origin"
}

func (e *NotThisLogError) Error() string {
	return fmt.Sprintf("no server keeps the audit log %s (%s): give its host in --server", e.Origin, strings.Join(e.Others, "; "))
}
