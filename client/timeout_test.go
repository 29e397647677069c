package client

import (
	"context"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// TestTimeout: a call's deadline reaches the server as grpc-timeout in
// gRPC's form (at most 8 digits and a unit), no later than the deadline
// and less than a unit's rounding before it, from milliseconds to a
// century; a call without a deadline carries none; a deadline already
// past ends the call before anything is sent. (TestAgainstGRPCGo checks
// that grpc-go's server reads it as the client's deadline.)
func TestTimeout(t *testing.T) {
	got := make(chan string, 1)
	h2 := new(http.Protocols)
	h2.SetUnencryptedHTTP2(true)
	srv := &http.Server{Protocols: h2, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Get("Grpc-Timeout")
		w.Header().Set("Content-Type", "application/grpc")
		w.Header().Set("Grpc-Status", "0")
		w.WriteHeader(200)
	})}
	sock := t.TempDir() + "/t.sock"
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })
	var d net.Dialer
	c := newConn(func(ctx context.Context) (net.Conn, error) { return d.DialContext(ctx, "unix", sock) }, "localhost")
	defer c.Close()

	form := regexp.MustCompile(`^([0-9]{1,8})([HMSmun])$`)
	units := map[string]time.Duration{"H": time.Hour, "M": time.Minute, "S": time.Second, "m": time.Millisecond, "u": time.Microsecond, "n": time.Nanosecond}
	_ = c.Invoke(context.Background(), "/t.T/X", wrapperspb.String(""), new(wrapperspb.StringValue))
	if v := <-got; v != "" {
		t.Errorf("a call without a deadline carried grpc-timeout %q", v)
	}
	for _, d := range []time.Duration{50 * time.Millisecond, 90 * time.Second, 30 * time.Hour, 1000 * time.Hour, 1 << 62} {
		cctx, cancel := context.WithTimeout(context.Background(), d)
		_ = c.Invoke(cctx, "/t.T/X", wrapperspb.String(""), new(wrapperspb.StringValue))
		cancel()
		var v string
		select {
		case v = <-got:
		case <-time.After(10 * time.Second):
			t.Fatalf("%v: the call never reached the server", d)
		}
		m := form.FindStringSubmatch(v)
		if m == nil {
			t.Errorf("%v: grpc-timeout %q", d, v)
			continue
		}
		n, _ := strconv.ParseInt(m[1], 10, 64)
		sent := time.Duration(n) * units[m[2]]
		if sent > d || d-sent > units[m[2]]+time.Second {
			t.Errorf("%v: grpc-timeout %q (%v)", d, v, sent)
		}
	}
	past, cancel := context.WithTimeout(context.Background(), -time.Second)
	defer cancel()
	if err := c.Invoke(past, "/t.T/X", wrapperspb.String(""), new(wrapperspb.StringValue)); status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("a deadline already past: %v", err)
	}
	select {
	case v := <-got:
		t.Errorf("a call past its deadline reached the server (grpc-timeout %q)", v)
	default:
	}
}
