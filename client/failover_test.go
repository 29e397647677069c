package client

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	coilyv1 "coily.dev/coily/proto/coily/v1"
	coilyv1grpc "coily.dev/coily/proto/coily/v1/coilyv1grpc"
	"coily.dev/coily/refusal"
)

func TestFailsOver(t *testing.T) {
	refused := func(c refusal.Code) error { return refusal.Status(&refusal.Error{Code: c, Msg: "no"}).Err() }
	notConn := &notConnected{status.New(codes.Unavailable, "connection error: connection refused")}
	tests := []struct {
		name                         string
		err                          error
		once, notStarted, idempotent bool
	}{
		{"success", nil, false, false, false},
		{"no connection", notConn, true, true, true},
		{"connection lost or server unavailable", status.Error(codes.Unavailable, "connection error: EOF"), false, false, true},
		{"state unavailable", refused(refusal.StateUnavailable), false, true, true},
		{"state unavailable as a refusal", refusal.FromStatus(refused(refusal.StateUnavailable)), false, true, true},
		{"sandbox unavailable (decided, started)", refused(refusal.SandboxUnavailable), false, false, false},
		{"credential unavailable", refused(refusal.CredentialUnavailable), false, false, false},
		{"lockout", refused(refusal.LockoutActive), false, false, false},
		{"rate limit", refused(refusal.RateLimit), false, false, false},
		{"policy deny", refused(refusal.PolicyDeny), false, false, false},
		{"deadline", status.Error(codes.DeadlineExceeded, "deadline"), false, false, false},
		{"cancelled", status.Error(codes.Canceled, "cancelled"), false, false, false},
		{"internal", status.Error(codes.Internal, "boom"), false, false, false},
		{"not a status", errors.New("odd"), false, false, false},
		{"unknown reason in coily's domain, Unavailable", refused(refusal.Code("made-up")), false, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for r, want := range map[rule]bool{once: tt.once, notStarted: tt.notStarted, idempotent: tt.idempotent} {
				if got := failsOver(r, tt.err); got != want {
					t.Errorf("failsOver(%d, %v) = %v, want %v", r, tt.err, got, want)
				}
			}
		})
	}
}

// scripted is a server whose Exec and Status do what the test says.
type scripted struct {
	coilyv1grpc.UnimplementedCoilyServiceServer
	exec       func(grpc.ServerStreamingServer[coilyv1.ExecResponse]) error
	status     func() error
	execs, sts atomic.Int32
	logOrigin  string // AuditCheckpoint's log ("": unimplemented)
	pulls      atomic.Int32
}

// Relay answers every request.
func (s *scripted) Relay(context.Context, *coilyv1.RelayRequest) (*coilyv1.RelayResponse, error) {
	return &coilyv1.RelayResponse{Response: []byte("{}")}, nil
}

// AuditCheckpoint answers as witness.AnswerPull: its log's body, or only
// its origin to a request pinning another.
func (s *scripted) AuditCheckpoint(_ context.Context, in *coilyv1.AuditCheckpointRequest) (*coilyv1.AuditCheckpointResponse, error) {
	s.pulls.Add(1)
	if s.logOrigin == "" {
		return nil, status.Error(codes.Unimplemented, "no")
	}
	out := &coilyv1.AuditCheckpointResponse{LogOrigin: s.logOrigin}
	if in.GetOrigin() == "" || in.GetOrigin() == s.logOrigin {
		out.AddCheckpoint = []byte(s.logOrigin)
	}
	return out, nil
}

func (s *scripted) Exec(_ *coilyv1.ExecRequest, stream grpc.ServerStreamingServer[coilyv1.ExecResponse]) error {
	s.execs.Add(1)
	if s.exec != nil {
		return s.exec(stream)
	}
	return runs(stream)
}

func (s *scripted) Status(context.Context, *coilyv1.StatusRequest) (*coilyv1.StatusResponse, error) {
	s.sts.Add(1)
	if s.status != nil {
		if err := s.status(); err != nil {
			return nil, err
		}
	}
	return &coilyv1.StatusResponse{}, nil
}

// runs answers an Exec that ran: output, then exit 0.
func runs(stream grpc.ServerStreamingServer[coilyv1.ExecResponse]) error {
	if err := stream.Send(&coilyv1.ExecResponse{Event: &coilyv1.ExecResponse_Output{Output: &coilyv1.ExecOutput{Data: []byte("ran")}}}); err != nil {
		return err
	}
	return stream.Send(&coilyv1.ExecResponse{Event: &coilyv1.ExecResponse_Exit{Exit: &coilyv1.ExecExit{}}})
}

// serveScripted serves s on a unix socket (nil: a socket nobody listens
// on) and returns its target.
func serveScripted(t *testing.T, name string, s *scripted) Target {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "s")
	if s != nil {
		l, err := net.Listen("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		g := grpc.NewServer()
		coilyv1grpc.RegisterCoilyServiceServer(g, s)
		go func() { _ = g.Serve(l) }()
		t.Cleanup(g.Stop)
	}
	var d net.Dialer
	return Target{Name: name, Dial: func(ctx context.Context) (net.Conn, error) { return d.DialContext(ctx, "unix", sock) }}
}

func serversClient(t *testing.T, targets ...Target) *Client {
	t.Helper()
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	t.Setenv("HOME", t.TempDir())
	c := NewServers(targets, nil)
	t.Cleanup(func() { c.Close() })
	return c
}

func execOut(t *testing.T, c *Client) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out sink
	_, err := c.Exec(ctx, &coilyv1.ExecRequest{Argv: []string{"x"}}, &out, io.Discard)
	return string(out), err
}

type sink []byte

func (s *sink) Write(p []byte) (int, error) { *s = append(*s, p...); return len(p), nil }

func TestExecFailover(t *testing.T) {
	stateDown := func(grpc.ServerStreamingServer[coilyv1.ExecResponse]) error {
		return refusal.Status(&refusal.Error{Code: refusal.StateUnavailable, Msg: "no quorum"}).Err()
	}
	brokenAfterStart := func(stream grpc.ServerStreamingServer[coilyv1.ExecResponse]) error {
		_ = stream.Send(&coilyv1.ExecResponse{Event: &coilyv1.ExecResponse_Output{Output: &coilyv1.ExecOutput{Data: []byte("half")}}})
		return refusal.Status(&refusal.Error{Code: refusal.StateUnavailable, Msg: "late"}).Err()
	}
	tests := []struct {
		name       string
		first      *scripted // nil: nobody listens
		wantOut    string
		wantCode   refusal.Code
		wantSecond int32
	}{
		{"first not listening: the second runs it", nil, "ran", "", 1},
		{"first refuses state-unavailable: the second runs it", &scripted{exec: stateDown}, "ran", "", 1},
		{"first unavailable without saying it did not start: not resent", &scripted{exec: func(grpc.ServerStreamingServer[coilyv1.ExecResponse]) error {
			return status.Error(codes.Unavailable, "going away")
		}}, "", refusal.Internal, 0},
		{"first refuses lockout: not resent", &scripted{exec: func(grpc.ServerStreamingServer[coilyv1.ExecResponse]) error {
			return refusal.Status(&refusal.Error{Code: refusal.LockoutActive, Msg: "locked"}).Err()
		}}, "", refusal.LockoutActive, 0},
		{"first broken after it started: never resent", &scripted{exec: brokenAfterStart}, "half", refusal.StateUnavailable, 0},
		{"first runs it", &scripted{}, "ran", "", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			second := &scripted{}
			c := serversClient(t, serveScripted(t, "a", tt.first), serveScripted(t, "b", second))
			out, err := execOut(t, c)
			if out != tt.wantOut {
				t.Errorf("output %q, want %q", out, tt.wantOut)
			}
			var r *refusal.Error
			switch {
			case tt.wantCode == "" && err != nil:
				t.Errorf("Exec: %v", err)
			case tt.wantCode != "" && (!errors.As(err, &r) || r.Code != tt.wantCode):
				t.Errorf("Exec: %v, want %s", err, tt.wantCode)
			}
			if got := second.execs.Load(); got != tt.wantSecond {
				t.Errorf("the second server had %d execs, want %d", got, tt.wantSecond)
			}
			if tt.first != nil && tt.first.execs.Load() != 1 {
				t.Errorf("the first server had %d execs, want 1", tt.first.execs.Load())
			}
		})
	}
}

func TestIdempotentFailover(t *testing.T) {
	first := &scripted{status: func() error { return status.Error(codes.Unavailable, "draining") }}
	second := &scripted{}
	c := serversClient(t, serveScripted(t, "a", first), serveScripted(t, "b", second))
	for range 2 {
		if _, err := c.API.Status(context.Background(), &coilyv1.StatusRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	// The second call starts where the first was answered.
	if a, b := first.sts.Load(), second.sts.Load(); a != 1 || b != 2 {
		t.Errorf("status calls: first %d, second %d; want 1 and 2", a, b)
	}
}

func TestStickyAcrossClients(t *testing.T) {
	second := &scripted{}
	a, b := serveScripted(t, "a", nil), serveScripted(t, "b", second)
	c := serversClient(t, a, b)
	if _, err := c.API.Status(context.Background(), &coilyv1.StatusRequest{}); err != nil {
		t.Fatal(err)
	}
	c.Close()
	path := stickyPath([]Target{a, b})
	if data, err := os.ReadFile(path); err != nil || string(data) != "b\n" {
		t.Fatalf("sticky file: %q, %v", data, err)
	}
	// A later client starts at b: a's dial is never tried.
	var dialedA atomic.Int32
	a2 := Target{Name: "a", Dial: func(ctx context.Context) (net.Conn, error) { dialedA.Add(1); return a.Dial(ctx) }}
	c2 := NewServers([]Target{a2, b}, nil)
	defer c2.Close()
	if _, err := c2.API.Status(context.Background(), &coilyv1.StatusRequest{}); err != nil {
		t.Fatal(err)
	}
	if dialedA.Load() != 0 {
		t.Errorf("a dialed %d times, want 0", dialedA.Load())
	}
}

func TestStickyFileHostile(t *testing.T) {
	names := []string{"a:7443", "b:7443"}
	dir := t.TempDir()
	for _, tt := range []struct {
		name, content string
		want          int
	}{
		{"absent", "", 0},
		{"second", "b:7443\n", 1},
		{"not in the list", "evil:7443\n", 0},
		{"two lines", "b:7443\na:7443\n", 0},
		{"too long", string(make([]byte, 4<<10)), 0},
		{"nul", "b:7443\x00", 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(dir, tt.name)
			if tt.content != "" {
				if err := os.WriteFile(path, []byte(tt.content), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			if got := loadSticky(path, names); got != tt.want {
				t.Errorf("loadSticky = %d, want %d", got, tt.want)
			}
		})
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	if got := loadSticky(fifo, names); got != 0 { // and it does not hang
		t.Errorf("a FIFO: %d, want 0", got)
	}
	if got := loadSticky("", names); got != 0 {
		t.Errorf("no path: %d", got)
	}
	saveSticky(filepath.Join(dir, "file-not-dir", "x"), "b:7443") // never a failure
}

// AuditCheckpoint pinning a log asks each server until the one that keeps
// it answers (each server keeps its own log), starting from the one the
// client sticks to, and leaves the other calls there; a server down is an
// outage, every server keeping another log is NotThisLogError.
func TestAuditCheckpointFindsThePinnedLog(t *testing.T) {
	a, b := &scripted{logOrigin: "coily/a"}, &scripted{logOrigin: "coily/b"}
	c := serversClient(t, serveScripted(t, "b", b), serveScripted(t, "a", a)) // sticks to b
	var by []string
	ctx := WithAnswered(context.Background(), func(s string) { by = append(by, s) })
	for range 2 {
		r, err := c.API.AuditCheckpoint(ctx, &coilyv1.AuditCheckpointRequest{Origin: "coily/a"})
		if err != nil || string(r.GetAddCheckpoint()) != "coily/a" {
			t.Fatalf("pinned to a: %q, %v", r.GetAddCheckpoint(), err)
		}
	}
	if _, err := c.API.Relay(ctx, &coilyv1.RelayRequest{}); err != nil {
		t.Fatal(err)
	}
	if strings.Join(by, ",") != "a,a,b" {
		t.Errorf("answered by %q, want a, a (the pulls) and b (the relay, where the client sticks)", by)
	}
	if _, err := c.API.Status(context.Background(), &coilyv1.StatusRequest{}); err != nil {
		t.Fatal(err)
	}
	if b.sts.Load() != 1 || a.sts.Load() != 0 {
		t.Errorf("after the pulls Status went to a (%d) not b (%d)", a.sts.Load(), b.sts.Load())
	}
	if a.pulls.Load() != 2 || b.pulls.Load() != 2 {
		t.Errorf("pulls: a %d, b %d; want 2 each", a.pulls.Load(), b.pulls.Load())
	}

	_, err := c.API.AuditCheckpoint(context.Background(), &coilyv1.AuditCheckpointRequest{Origin: "coily/c"})
	var ntl *NotThisLogError
	if !errors.As(err, &ntl) || !strings.Contains(err.Error(), "a keeps coily/a") || !strings.Contains(err.Error(), "b keeps coily/b") {
		t.Fatalf("no server keeps c: %v", err)
	}

	down := serversClient(t, serveScripted(t, "b", b), serveScripted(t, "a", nil))
	_, err = down.API.AuditCheckpoint(context.Background(), &coilyv1.AuditCheckpointRequest{Origin: "coily/a"})
	if err == nil || errors.As(err, &ntl) || !Unreachable(err) {
		t.Fatalf("a down: %v, want it unreachable", err)
	}
}
