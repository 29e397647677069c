package cli

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/grpc"

	coilyv1 "coily.dev/coily/proto/coily/v1"
	coilyv1grpc "coily.dev/coily/proto/coily/v1/coilyv1grpc"
)

// stopServer records the reason of each lockout, unlock, pause and resume.
type stopServer struct {
	coilyv1grpc.UnimplementedCoilyServiceServer
	reasons chan string
}

func (s *stopServer) Lockout(_ context.Context, r *coilyv1.LockoutRequest) (*coilyv1.LockoutResponse, error) {
	s.reasons <- r.GetReason()
	return &coilyv1.LockoutResponse{}, nil
}

func (s *stopServer) Unlock(_ context.Context, r *coilyv1.UnlockRequest) (*coilyv1.UnlockResponse, error) {
	s.reasons <- r.GetReason()
	return &coilyv1.UnlockResponse{}, nil
}

func (s *stopServer) Pause(_ context.Context, r *coilyv1.PauseRequest) (*coilyv1.PauseResponse, error) {
	s.reasons <- r.GetReason()
	return &coilyv1.PauseResponse{}, nil
}

func (s *stopServer) Resume(_ context.Context, r *coilyv1.ResumeRequest) (*coilyv1.ResumeResponse, error) {
	s.reasons <- r.GetReason()
	return &coilyv1.ResumeResponse{}, nil
}

// TestStopReasonWords: `tailscale ssh HOST coily lockout --reason "agent
// misbehaving"` reaches coily as `--reason agent misbehaving` (ssh joins
// the words, the remote shell splits them again): the words after the
// flags are the rest of the reason, for every stop control, and the
// brake never fails on them (TestHeadscaleTailscaleSSHLockout found it
// refused as an unknown command).
func TestStopReasonWords(t *testing.T) {
	dir, err := os.MkdirTemp("", "coily-cli-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "s")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &stopServer{reasons: make(chan string, 1)}
	g := grpc.NewServer()
	coilyv1grpc.RegisterCoilyServiceServer(g, srv)
	go func() { _ = g.Serve(l) }()
	t.Cleanup(g.Stop)

	for _, tc := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"lockout", "--reason", "agent", "misbehaving"}, nil, "agent misbehaving"},
		{[]string{"lockout", "--reason", "agent misbehaving"}, nil, "agent misbehaving"},
		{[]string{"lockout", "agent", "misbehaving"}, nil, "agent misbehaving"},
		{[]string{"lockout"}, nil, ""},
		{[]string{"lockout", "now"}, map[string]string{"COILY_REASON": "leak:"}, "leak: now"},
		{[]string{"unlock", "--reason", "drill", "over"}, nil, "drill over"},
		{[]string{"pause", "--reason", "lunch", "--", "--json"}, nil, "lunch --json"},
		{[]string{"resume", "--reason", "back"}, nil, "back"},
		// Given whole, a reason is sent exactly: never trimmed (U+0085 and
		// spaces are white space to strings.TrimSpace).
		{[]string{"lockout", "--reason", " odd\u0085"}, nil, " odd\u0085"},
		{[]string{"lockout", "--reason", "odd\u0085", "more"}, nil, "odd\u0085 more"},
	} {
		env := map[string]string{"COILY_SOCKET": sock}
		for k, v := range tc.env {
			env[k] = v
		}
		if code, _, errb := run(t, env, tc.args...); code != 0 {
			t.Errorf("%q: exit %d: %s", tc.args, code, errb)
			continue
		}
		if got := <-srv.reasons; got != tc.want {
			t.Errorf("%q: reason %q, want %q", tc.args, got, tc.want)
		}
	}
}
