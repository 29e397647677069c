package client

import (
	"bytes"
	"context"
	"errors"
	"net"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"

	coilyv1 "coily.dev/coily/proto/coily/v1"
	coilyv1grpc "coily.dev/coily/proto/coily/v1/coilyv1grpc"
	"coily.dev/coily/refusal"
)

// fakeServer refuses the first `refusals` Execs with code, then runs a
// command that prints "out" and "err" and exits 3.
type fakeServer struct {
	coilyv1grpc.UnimplementedCoilyServiceServer
	code     refusal.Code
	refusals int32
	calls    atomic.Int32
}

func (f *fakeServer) Exec(_ *coilyv1.ExecRequest, stream grpc.ServerStreamingServer[coilyv1.ExecResponse]) error {
	if f.calls.Add(1) <= f.refusals {
		return refusal.Status(&refusal.Error{Code: f.code, Msg: "no", RetryAfter: 10 * time.Millisecond}).Err()
	}
	for _, ev := range []*coilyv1.ExecResponse{
		{Event: &coilyv1.ExecResponse_Started{Started: &coilyv1.ExecStarted{RequestId: "r"}}},
		{Event: &coilyv1.ExecResponse_Output{Output: &coilyv1.ExecOutput{Stream: coilyv1.Stream_STREAM_STDOUT, Data: []byte("out")}}},
		{Event: &coilyv1.ExecResponse_Output{Output: &coilyv1.ExecOutput{Stream: coilyv1.Stream_STREAM_STDERR, Data: []byte("err")}}},
		{Event: &coilyv1.ExecResponse_Exit{Exit: &coilyv1.ExecExit{ExitCode: 3}}},
	} {
		if err := stream.Send(ev); err != nil {
			return err
		}
	}
	return nil
}

func startFake(t *testing.T, f *fakeServer) *Client {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "s")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	coilyv1grpc.RegisterCoilyServiceServer(g, f)
	go func() { _ = g.Serve(l) }()
	t.Cleanup(g.Stop)
	c, err := DialLocal(sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestExecRetriesOnlyRateLimit(t *testing.T) {
	tests := []struct {
		name      string
		code      refusal.Code
		refusals  int32
		wantCalls int32
		wantCode  refusal.Code // "" means success
	}{
		{"success", refusal.RateLimit, 0, 1, ""},
		{"rate limit then success", refusal.RateLimit, 2, 3, ""},
		{"rate limit exhausts retries", refusal.RateLimit, 10, 4, refusal.RateLimit},
		{"policy deny fails fast", refusal.PolicyDeny, 1, 1, refusal.PolicyDeny},
		{"concurrency busy fails fast", refusal.ConcurrencyBusy, 1, 1, refusal.ConcurrencyBusy},
		{"lockout fails fast", refusal.LockoutActive, 1, 1, refusal.LockoutActive},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := &fakeServer{code: tt.code, refusals: tt.refusals}
			c := startFake(t, f)
			var out, errb bytes.Buffer
			exit, err := c.Exec(context.Background(), &coilyv1.ExecRequest{Argv: []string{"/bin/x"}}, &out, &errb)
			if got := f.calls.Load(); got != tt.wantCalls {
				t.Errorf("calls = %d, want %d", got, tt.wantCalls)
			}
			if tt.wantCode == "" {
				if err != nil || ExitCode(exit) != 3 || out.String() != "out" || errb.String() != "err" {
					t.Fatalf("exit %v err %v out %q err %q", exit, err, out.String(), errb.String())
				}
				return
			}
			var r *refusal.Error
			if !errors.As(err, &r) || r.Code != tt.wantCode {
				t.Fatalf("err = %v, want %s", err, tt.wantCode)
			}
		})
	}
}

func TestExecRetryHonoursContext(t *testing.T) {
	f := &fakeServer{code: refusal.RateLimit, refusals: 100}
	c := startFake(t, f)
	c.RateLimitRetries = 1000
	// start is read before the context is made: read after, a pause of
	// the test's goroutine in between (a loaded machine) shortens what
	// the test measures (CI saw 76 ms).
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := c.Exec(ctx, &coilyv1.ExecRequest{Argv: []string{"/bin/x"}}, &bytes.Buffer{}, &bytes.Buffer{})
	if err == nil {
		t.Fatal("Exec succeeded against a server refusing every call")
	}
	// It returned because the context ended (gRPC's own deadline timer may
	// fire a moment before ctx's), not because it gave up retrying.
	if took := time.Since(start); took < 90*time.Millisecond {
		t.Fatalf("Exec returned %v after %s, before its context ended", err, took)
	}
	if n := f.calls.Load(); n >= 100 {
		t.Fatalf("%d calls: the retries did not back off", n)
	}
}

func TestExitCode(t *testing.T) {
	for _, tt := range []struct {
		exit *coilyv1.ExecExit
		want int
	}{
		{&coilyv1.ExecExit{ExitCode: 0}, 0},
		{&coilyv1.ExecExit{ExitCode: 7}, 7},
		{&coilyv1.ExecExit{ExitCode: -1, Signal: 9}, 137},
		{&coilyv1.ExecExit{ExitCode: -1, Signal: 15}, 143},
	} {
		if got := ExitCode(tt.exit); got != tt.want {
			t.Errorf("ExitCode(%v) = %d, want %d", tt.exit, got, tt.want)
		}
	}
}
