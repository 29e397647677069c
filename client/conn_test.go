package client

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http/httpguts"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// grpcServer is a real grpc-go server whose every method is handle, on a
// unix socket; it returns a Conn to it.
func grpcServer(t *testing.T, handle func(method string, s grpc.ServerStream) error, opts ...grpc.ServerOption) *Conn {
	t.Helper()
	sock := t.TempDir() + "/s.sock"
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	opts = append(opts, grpc.UnknownServiceHandler(func(_ any, s grpc.ServerStream) error {
		m, _ := grpc.MethodFromServerStream(s)
		return handle(m, s)
	}))
	g := grpc.NewServer(opts...)
	go func() { _ = g.Serve(ln) }()
	t.Cleanup(g.Stop)
	var d net.Dialer
	c := newConn(func(ctx context.Context) (net.Conn, error) { return d.DialContext(ctx, "unix", sock) }, "localhost")
	t.Cleanup(func() { c.Close() })
	return c
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return c
}

// TestAgainstGRPCGo: unary and server-streaming calls, statuses with
// details, deadlines and large messages, against grpc-go's server.
func TestAgainstGRPCGo(t *testing.T) {
	var deadline time.Time
	c := grpcServer(t, func(method string, s grpc.ServerStream) error {
		in := new(wrapperspb.StringValue)
		if err := s.RecvMsg(in); err != nil {
			return err
		}
		switch method {
		case "/t.T/Echo":
			deadline, _ = s.Context().Deadline()
			return s.SendMsg(wrapperspb.String("echo " + in.GetValue()))
		case "/t.T/Three":
			for i := range 3 {
				if err := s.SendMsg(wrapperspb.String(strings.Repeat("x", i))); err != nil {
					return err
				}
			}
			return nil
		case "/t.T/Big":
			return s.SendMsg(wrapperspb.Bytes(make([]byte, 5<<20)))
		case "/t.T/Refuse":
			st, _ := status.New(codes.PermissionDenied, "no: 100% sure, ünïcode").WithDetails(&errdetails.ErrorInfo{Reason: "policy-deny", Domain: "coily.dev"})
			return st.Err()
		case "/t.T/AfterTwo":
			_ = s.SendMsg(wrapperspb.String("a"))
			_ = s.SendMsg(wrapperspb.String("b"))
			return status.Error(codes.ResourceExhausted, "slow down")
		}
		return status.Error(codes.Unimplemented, method)
	})

	out := new(wrapperspb.StringValue)
	if err := c.Invoke(context.Background(), "/t.T/Echo", wrapperspb.String("hi"), out); err != nil || out.GetValue() != "echo hi" {
		t.Fatalf("Echo: %v %q", err, out.GetValue())
	}
	if !deadline.IsZero() {
		t.Errorf("a call without a deadline arrived with one: %v", deadline)
	}
	dctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	want, _ := dctx.Deadline()
	if err := c.Invoke(dctx, "/t.T/Echo", wrapperspb.String("again"), out); err != nil {
		t.Fatal(err)
	}
	if d := deadline.Sub(want); d < -time.Second || d > time.Second {
		t.Errorf("server's deadline %v, client's %v", deadline, want)
	}

	s, err := c.NewStream(ctx(t), "/t.T/Three", wrapperspb.String(""), newString, 0)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for {
		m := new(wrapperspb.StringValue)
		err := recvMsg(s, m)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, m.GetValue())
	}
	if strings.Join(got, ",") != ",x,xx" {
		t.Errorf("stream: %q", got)
	}

	err = c.Invoke(ctx(t), "/t.T/Refuse", wrapperspb.String(""), out)
	st, _ := status.FromError(err)
	if st.Code() != codes.PermissionDenied || st.Message() != "no: 100% sure, ünïcode" || len(st.Details()) != 1 {
		t.Fatalf("Refuse: %v (details %v)", err, st.Details())
	}
	if info, ok := st.Details()[0].(*errdetails.ErrorInfo); !ok || info.GetReason() != "policy-deny" {
		t.Errorf("detail: %v", st.Details()[0])
	}

	s, err = c.NewStream(ctx(t), "/t.T/AfterTwo", wrapperspb.String(""), newString, 0)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := recvMsg(s, out); err != nil {
			t.Fatal(err)
		}
	}
	if err := recvMsg(s, out); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("third RecvMsg: %v", err)
	}
	if err := recvMsg(s, out); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("after the end: %v", err)
	}

	if err := c.Invoke(ctx(t), "/t.T/Nope", wrapperspb.String(""), out); status.Code(err) != codes.Unimplemented {
		t.Errorf("unknown method: %v", err)
	}
	big := new(wrapperspb.BytesValue)
	if err := c.Invoke(ctx(t), "/t.T/Big", wrapperspb.String(""), big); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("5 MiB answer at the default limit: %v", err)
	}
	s, err = c.NewStream(ctx(t), "/t.T/Big", wrapperspb.String(""), func() proto.Message { return big }, 6<<20)
	if err != nil {
		t.Fatal(err)
	}
	if m, err := s.Recv(); err != nil || len(big.GetValue()) != 5<<20 || m.Message != big {
		t.Errorf("5 MiB answer under a 6 MiB limit: %v, %d bytes", err, len(big.GetValue()))
	}
}

func newString() proto.Message { return new(wrapperspb.StringValue) }
func newBytes() proto.Message  { return new(wrapperspb.BytesValue) }

// recvMsg reads the stream's next answer into into.
func recvMsg(s *Stream[Message], into proto.Message) error {
	m, err := s.Recv()
	if err != nil {
		return err
	}
	proto.Reset(into)
	proto.Merge(into, m.Message)
	return nil
}

// TestLargeRequest: a request larger than HTTP/2's initial windows goes
// through (net/http's flow control), as Exec's stdin of 1 MiB must.
func TestLargeRequest(t *testing.T) {
	c := grpcServer(t, func(_ string, s grpc.ServerStream) error {
		in := new(wrapperspb.BytesValue)
		if err := s.RecvMsg(in); err != nil {
			return err
		}
		return s.SendMsg(wrapperspb.Int64(int64(len(in.GetValue()))))
	})
	out := new(wrapperspb.Int64Value)
	if err := c.Invoke(ctx(t), "/t.T/Len", wrapperspb.Bytes(bytes.Repeat([]byte{7}, 3<<20)), out); err != nil || out.GetValue() != 3<<20 {
		t.Fatalf("3 MiB request: %v, server read %d", err, out.GetValue())
	}
}

// TestCancelReachesServer: cancelling a call's context, or closing its
// stream, cancels it on the server (what stops a command on Ctrl-C).
func TestCancelReachesServer(t *testing.T) {
	ended := make(chan error, 2)
	c := grpcServer(t, func(_ string, s grpc.ServerStream) error {
		in := new(wrapperspb.StringValue)
		if err := s.RecvMsg(in); err != nil {
			return err
		}
		if err := s.SendMsg(wrapperspb.String("started")); err != nil {
			return err
		}
		select {
		case <-s.Context().Done():
			ended <- s.Context().Err()
		case <-time.After(30 * time.Second):
			ended <- errors.New("never cancelled")
		}
		return nil
	})
	for _, how := range []string{"context", "close"} {
		cctx, cancel := context.WithCancel(context.Background())
		s, err := c.NewStream(cctx, "/t.T/Wait", wrapperspb.String(""), newString, 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := recvMsg(s, new(wrapperspb.StringValue)); err != nil {
			t.Fatal(err)
		}
		if how == "context" {
			cancel()
			if err := recvMsg(s, new(wrapperspb.StringValue)); status.Code(err) != codes.Canceled {
				t.Errorf("RecvMsg after cancel: %v", err)
			}
		} else {
			s.Close()
		}
		if err := <-ended; !errors.Is(err, context.Canceled) {
			t.Errorf("%s: server's context ended with %v", how, err)
		}
		cancel()
	}
}

// TestUnreachable: no server is Unavailable; a context already over is its
// own code.
func TestUnreachable(t *testing.T) {
	var d net.Dialer
	sock := t.TempDir() + "/nobody.sock"
	c := newConn(func(ctx context.Context) (net.Conn, error) { return d.DialContext(ctx, "unix", sock) }, "localhost")
	defer c.Close()
	if err := c.Invoke(ctx(t), "/t.T/X", wrapperspb.String(""), new(wrapperspb.StringValue)); status.Code(err) != codes.Unavailable {
		t.Errorf("no server: %v", err)
	}
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	if err := c.Invoke(gone, "/t.T/X", wrapperspb.String(""), new(wrapperspb.StringValue)); status.Code(err) != codes.Canceled {
		t.Errorf("cancelled: %v", err)
	}
	if err := c.Invoke(ctx(t), "t.T/X", wrapperspb.String(""), new(wrapperspb.StringValue)); status.Code(err) != codes.Internal {
		t.Errorf("a method without its slash: %v", err)
	}
}

// hostileAnswer is what a server (or something posing as one) answers.
type hostileAnswer struct {
	name     string
	status   int
	header   http.Header
	body     []byte
	trailer  http.Header
	wantCode codes.Code
	wantMsgs int // messages read before the status
}

// msg is m as a gRPC message: a zero flag byte, the length, the bytes.
func msg(m proto.Message) []byte {
	b, _ := proto.Marshal(m)
	return append(binary.BigEndian.AppendUint32([]byte{0}, uint32(len(b))), b...)
}

func detailsBin(t testing.TB, code codes.Code, raw bool) string {
	any, _ := anypb.New(&errdetails.ErrorInfo{Reason: "policy-deny"})
	b, _ := proto.Marshal(&spb.Status{Code: int32(code), Message: "from details", Details: []*anypb.Any{any}})
	if raw {
		return base64.RawStdEncoding.EncodeToString(b)
	}
	return base64.StdEncoding.EncodeToString(b)
}

func hostileAnswers(t testing.TB) []hostileAnswer {
	grpcCT := http.Header{"Content-Type": {"application/grpc"}}
	ok := http.Header{"Grpc-Status": {"0"}}
	huge := make([]byte, 5)
	binary.BigEndian.PutUint32(huge[1:], 1<<31)
	compressed := msg(wrapperspb.String("z"))
	compressed[0] = 1
	return []hostileAnswer{
		{name: "well-formed", status: 200, header: grpcCT, body: msg(wrapperspb.String("a")), trailer: ok, wantCode: codes.OK, wantMsgs: 1},
		{name: "grpc+proto content type", status: 200, header: http.Header{"Content-Type": {"application/grpc+proto"}}, body: msg(wrapperspb.String("a")), trailer: ok, wantCode: codes.OK, wantMsgs: 1},
		{name: "HTTP 503", status: 503, header: grpcCT, wantCode: codes.Unavailable},
		{name: "HTTP 404", status: 404, header: grpcCT, wantCode: codes.Unimplemented},
		{name: "HTTP 302 not followed", status: 302, header: http.Header{"Location": {"http://elsewhere/"}}, wantCode: codes.Unknown},
		{name: "HTML", status: 200, header: http.Header{"Content-Type": {"text/html"}}, body: []byte("<html>"), wantCode: codes.Unknown},
		{name: "grpc-web content type", status: 200, header: http.Header{"Content-Type": {"application/grpc-web"}}, wantCode: codes.Unknown},
		{name: "no status", status: 200, header: grpcCT, body: msg(wrapperspb.String("a")), wantCode: codes.Internal, wantMsgs: 1},
		// connect-go calls an unreadable status Unknown (grpclite said
		// Internal): either reads as refusal code internal.
		{name: "status not a number", status: 200, header: grpcCT, trailer: http.Header{"Grpc-Status": {"zero"}}, wantCode: codes.Unknown},
		{name: "negative status", status: 200, header: grpcCT, trailer: http.Header{"Grpc-Status": {"-1"}}, wantCode: codes.Unknown},
		{name: "status out of range", status: 200, header: grpcCT, trailer: http.Header{"Grpc-Status": {"99"}}, wantCode: codes.Code(99)},
		{name: "compressed message", status: 200, header: grpcCT, body: compressed, trailer: ok, wantCode: codes.Internal},
		{name: "2 GiB length", status: 200, header: grpcCT, body: huge, trailer: ok, wantCode: codes.ResourceExhausted},
		{name: "truncated header", status: 200, header: grpcCT, body: []byte{0, 0}, trailer: ok, wantCode: codes.Internal},
		{name: "truncated message", status: 200, header: grpcCT, body: msg(wrapperspb.String("abcdef"))[:8], trailer: ok, wantCode: codes.Internal},
		{name: "garbage message", status: 200, header: grpcCT, body: []byte{0, 0, 0, 0, 3, 0xff, 0xff, 0xff}, trailer: ok, wantCode: codes.Internal},
		{name: "trailers-only error", status: 200, header: http.Header{"Content-Type": {"application/grpc"}, "Grpc-Status": {"7"}, "Grpc-Message": {"no%20way"}}, wantCode: codes.PermissionDenied},
		{name: "trailers-only OK", status: 200, header: http.Header{"Content-Type": {"application/grpc"}, "Grpc-Status": {"0"}}, wantCode: codes.OK},
		{name: "details", status: 200, header: grpcCT, trailer: http.Header{"Grpc-Status": {"7"}, "Grpc-Status-Details-Bin": {detailsBin(t, codes.PermissionDenied, false)}}, wantCode: codes.PermissionDenied},
		{name: "details unpadded", status: 200, header: grpcCT, trailer: http.Header{"Grpc-Status": {"7"}, "Grpc-Status-Details-Bin": {detailsBin(t, codes.PermissionDenied, true)}}, wantCode: codes.PermissionDenied},
		// grpc-status 0 is OK whatever the details say (connect-go reads
		// details of errors only); a stream that ends OK without the
		// answer a call needs is still a failure (Exec: no exit event).
		{name: "details of another code", status: 200, header: grpcCT, trailer: http.Header{"Grpc-Status": {"0"}, "Grpc-Status-Details-Bin": {detailsBin(t, codes.PermissionDenied, false)}}, wantCode: codes.OK},
		// An error whose details say another code (0 above all, which
		// would read as success: an Exec stream of endless empty messages)
		// is the server's fault, never what either code says.
		{name: "error with details of code 0", status: 200, header: grpcCT, trailer: http.Header{"Grpc-Status": {"7"}, "Grpc-Status-Details-Bin": {detailsBin(t, codes.OK, false)}}, wantCode: codes.Internal},
		{name: "error with details of another code", status: 200, header: grpcCT, trailer: http.Header{"Grpc-Status": {"7"}, "Grpc-Status-Details-Bin": {detailsBin(t, codes.Unavailable, false)}}, wantCode: codes.Internal},
		{name: "trailers-only error with details of code 0", status: 200, header: http.Header{"Content-Type": {"application/grpc"}, "Grpc-Status": {"7"}, "Grpc-Status-Details-Bin": {detailsBin(t, codes.OK, false)}}, wantCode: codes.Internal},
		{name: "details not base64", status: 200, header: grpcCT, trailer: http.Header{"Grpc-Status": {"7"}, "Grpc-Status-Details-Bin": {"!!!"}}, wantCode: codes.Internal},
		{name: "details not a Status", status: 200, header: grpcCT, trailer: http.Header{"Grpc-Status": {"7"}, "Grpc-Status-Details-Bin": {base64.StdEncoding.EncodeToString([]byte{0xff, 0xff})}}, wantCode: codes.Internal},
	}
}

// TestHostileAnswers: whatever a server answers, the call ends with a
// status that says what was wrong, never a panic or a message taken for
// another.
func TestHostileAnswers(t *testing.T) {
	answers := hostileAnswers(t)
	byName := map[string]hostileAnswer{}
	for _, a := range answers {
		byName[a.name] = a
	}
	c := hostileServer(t, func(name string) hostileAnswer { return byName[name] })

	for _, a := range answers {
		t.Run(a.name, func(t *testing.T) {
			n, err := readAll(ctx(t), c, a.name)
			if status.Code(err) != a.wantCode || n != a.wantMsgs {
				t.Errorf("got %v after %d messages, want %v after %d", err, n, a.wantCode, a.wantMsgs)
			}
			// A unary call succeeds only with exactly one answer and OK.
			err = c.Invoke(ctx(t), "/t.T/"+a.name, wrapperspb.String(""), new(wrapperspb.StringValue))
			if ok := a.wantCode == codes.OK && a.wantMsgs == 1; (err == nil) != ok {
				t.Errorf("as a unary call: %v", err)
			}
		})
	}
}

// hostileServer is an HTTP/2 server on a unix socket that answers each
// call /t.T/NAME with answer(NAME); it returns a Conn to it.
func hostileServer(t testing.TB, answer func(name string) hostileAnswer) *Conn {
	h2 := new(http.Protocols)
	h2.SetUnencryptedHTTP2(true)
	srv := &http.Server{Protocols: h2, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a := answer(strings.TrimPrefix(r.URL.Path, "/t.T/"))
		for k, v := range a.header {
			w.Header()[k] = v
		}
		for k := range a.trailer {
			w.Header().Add("Trailer", k)
		}
		w.WriteHeader(a.status)
		_, _ = w.Write(a.body)
		for k, v := range a.trailer {
			w.Header()[k] = v
		}
	})}
	sock := t.TempDir() + "/h.sock"
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })
	var d net.Dialer
	c := newConn(func(ctx context.Context) (net.Conn, error) { return d.DialContext(ctx, "unix", sock) }, "localhost")
	t.Cleanup(func() { c.Close() })
	return c
}

// readAll reads the answers of a call of /t.T/name to its end: how many
// came, and the status (nil for OK). Reading again after the end says the
// same.
func readAll(ctx context.Context, c *Conn, name string) (int, error) {
	s, err := c.NewStream(ctx, "/t.T/"+name, wrapperspb.String(""), newString, 0)
	n := 0
	for err == nil {
		_, err = s.Recv()
		if err == nil {
			n++
		}
	}
	if s != nil {
		if _, again := s.Recv(); again != err && !(errors.Is(again, io.EOF) && errors.Is(err, io.EOF)) {
			return n, fmt.Errorf("after the end: %v, then %v", err, again)
		}
	}
	if err == io.EOF {
		err = nil
	}
	return n, err
}

// FuzzAnswer has a server answer a stream body and trailers: the call
// must end with io.EOF or a status, never panic, and say the same when
// read again after its end.
func FuzzAnswer(f *testing.F) {
	for _, a := range hostileAnswers(f) {
		f.Add(a.body, a.trailer.Get("Grpc-Status"), a.trailer.Get("Grpc-Message"), a.trailer.Get("Grpc-Status-Details-Bin"))
	}
	var cur hostileAnswer
	c := hostileServer(f, func(string) hostileAnswer { return cur })
	f.Fuzz(func(t *testing.T, body []byte, code, message, details string) {
		tr := http.Header{}
		for k, v := range map[string]string{"Grpc-Status": code, "Grpc-Message": message, "Grpc-Status-Details-Bin": details} {
			if v != "" && httpguts.ValidHeaderFieldValue(v) {
				tr.Set(k, v)
			}
		}
		cur = hostileAnswer{status: 200, header: http.Header{"Content-Type": {"application/grpc"}}, body: body, trailer: tr}
		_, err := readAll(context.Background(), c, "fuzz")
		if err != nil {
			if _, ok := status.FromError(err); !ok {
				t.Fatalf("not a status: %v", err)
			}
		}
	})
}
