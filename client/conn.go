package client

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// DefaultMaxRecvSize bounds one received message unless the call says
// otherwise (Relay's MaxRelayAnswer), as grpc-go's client does by
// default: a larger one fails the call (ResourceExhausted).
const DefaultMaxRecvSize = 4 << 20

// ConnectTimeout bounds connecting to the server and hearing its first
// bytes (its HTTP/2 settings), as grpc-go's connect deadline does: a dial
// that never completes, or something on the socket that accepts and says
// nothing, fails the call with Unavailable instead of hanging it.
const ConnectTimeout = 20 * time.Second

// Conn is the HTTP/2 connection to one server that every call of a Client
// goes over: Go's own HTTP/2 without TLS (h2c, as the server serves on
// the local socket and the tailnet, where WireGuard encrypts), one
// connection at a time kept open and reused. connect-go speaks gRPC over
// it (connect.WithGRPC).
type Conn struct {
	tr   *http.Transport
	http *http.Client
	base string // http://authority
	open *connSet
}

// newConn returns a Conn whose connections come from dial; authority is
// the :authority of every call ("localhost" for a unix socket, as grpc-go
// sends, or the server's host:port).
func newConn(dial func(ctx context.Context) (net.Conn, error), authority string) *Conn {
	p := new(http.Protocols)
	p.SetUnencryptedHTTP2(true)
	open := &connSet{timeout: ConnectTimeout, conns: map[*trackedConn]struct{}{}}
	tr := &http.Transport{
		Protocols: p,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return open.dial(ctx, dial)
		},
		MaxResponseHeaderBytes: 1 << 20,
		DisableCompression:     true,
	}
	// A gRPC answer is never a redirect: a 3xx is an error, not followed.
	noRedirect := func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	hc := &http.Client{Transport: lostTransport{tr}, CheckRedirect: noRedirect}
	return &Conn{tr: tr, http: hc, base: "http://" + authority, open: open}
}

// lostTransport marks a failed read of an answer as the connection's
// (Unavailable): a body read to its end says io.EOF, so any other error
// is the connection lost, cut or closed. connect-go keeps an error with
// its code as it is; without this it would call a lost connection
// inside a message Unknown.
type lostTransport struct{ http.RoundTripper }

func (t lostTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := t.RoundTripper.RoundTrip(r)
	if err == nil {
		resp.Body = lostBody{resp.Body}
	}
	return resp, err
}

type lostBody struct{ io.ReadCloser }

func (b lostBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && err != io.EOF {
		err = connect.NewError(connect.CodeUnavailable, err)
	}
	return n, err
}

// options are every call's: gRPC's protocol, uncompressed answers, and a
// bound on one answer.
func options(maxRecv int) []connect.ClientOption {
	return []connect.ClientOption{connect.WithGRPC(), connect.WithAcceptCompression("gzip", nil, nil),
		connect.WithReadMaxBytes(maxRecv)}
}

// Close closes every connection, as grpc-go's ClientConn.Close does: a
// call still running fails (Unavailable).
func (c *Conn) Close() error {
	c.tr.CloseIdleConnections()
	c.open.closeAll()
	return nil
}

// Invoke makes a unary call of any service by its full name
// ("/grpc.health.v1.Health/Check"); the answer is unmarshalled into resp.
func (c *Conn) Invoke(ctx context.Context, method string, req, resp proto.Message) error {
	if err := checkMethod(method); err != nil {
		return err
	}
	_, err := c.stubs(method, DefaultMaxRecvSize, func() proto.Message { return resp }).CallUnary(ctx, connect.NewRequest(&Message{req}))
	return err
}

// NewStream makes a server-streaming call of any service by its full
// name, each answer read into a message newResp makes; maxRecv bounds
// one answer (0: DefaultMaxRecvSize).
func (c *Conn) NewStream(ctx context.Context, method string, req proto.Message, newResp func() proto.Message, maxRecv int) (*Stream[Message], error) {
	if err := checkMethod(method); err != nil {
		return nil, err
	}
	if maxRecv == 0 {
		maxRecv = DefaultMaxRecvSize
	}
	return stream(c.stubs(method, maxRecv, newResp).CallServerStream(ctx, connect.NewRequest(&Message{req})))
}

// checkMethod refuses a method name that is not /package.Service/Method.
func checkMethod(method string) error {
	if !strings.HasPrefix(method, "/") {
		return status.Errorf(codes.Internal, "method %q: want /package.Service/Method", method)
	}
	return nil
}

// stubs is connect-go's client of one method whose messages are known at
// run time only.
func (c *Conn) stubs(method string, maxRecv int, newResp func() proto.Message) *connect.Client[Message, Message] {
	opts := append(options(maxRecv), connect.WithInterceptors(statusInterceptor{}),
		connect.WithResponseInitializer(func(_ connect.Spec, m any) error {
			m.(*Message).Message = newResp()
			return nil
		}))
	return connect.NewClient[Message, Message](c.http, c.base+method, opts...)
}

// Message carries a proto.Message of a type known only at run time
// through connect-go's generic client (Conn.Invoke, Conn.NewStream).
type Message struct{ proto.Message }

// statusError turns a connect-go error into the gRPC status error the
// rest of coily reads (refusal.FromStatus, Unreachable, the bridge's
// sorting): the server's code, message and details as they came, the
// context's code when it ended the call, and a failure below gRPC (no
// server, a connection lost) Unavailable, as grpc-go says it.
func statusError(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	switch ctx.Err() {
	case context.Canceled:
		return status.Error(codes.Canceled, context.Canceled.Error())
	case context.DeadlineExceeded:
		return status.Error(codes.DeadlineExceeded, context.DeadlineExceeded.Error())
	}
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return status.Error(codes.Unknown, err.Error())
	}
	if !connect.IsWireError(ce) {
		switch ce.Code() {
		case connect.CodeUnavailable, connect.CodeDeadlineExceeded, connect.CodeCanceled:
			// Not the call's deadline or cancel (ctx has none left to
			// pass): the connect timeout, or the connection failing (a
			// stream reset as the connection went, which connect-go reads
			// as cancelled).
			st := status.New(codes.Unavailable, "connection error: "+transportCause(ce))
			if df := (*dialFailed)(nil); errors.As(ce, &df) {
				return &notConnected{st}
			}
			return st.Err()
		case connect.CodeInvalidArgument:
			// An answer that cannot be unmarshalled: the server's fault,
			// as grpc-go says it, not a bad request of ours.
			return status.Error(codes.Internal, ce.Message())
		}
	}
	if connect.IsWireError(ce) {
		// connect-go lets the code inside grpc-status-details-bin stand
		// for grpc-status. An error must carry one code: details that say
		// 0 (which would read as success) or another code than the header
		// are the server's fault, as grpc-go reads them.
		if h := ce.Meta().Get("Grpc-Status"); ce.Code() == 0 || (h != "" && h != strconv.Itoa(int(ce.Code()))) {
			return status.Errorf(codes.Internal, "grpc-status-details-bin code %d does not match grpc-status %q", ce.Code(), h)
		}
	}
	st := &spb.Status{Code: int32(ce.Code()), Message: ce.Message()}
	for _, d := range ce.Details() {
		st.Details = append(st.Details, &anypb.Any{TypeUrl: "type.googleapis.com/" + d.Type(), Value: d.Bytes()})
	}
	return status.ErrorProto(st)
}

// transportCause is what failed below gRPC, without the URL net/http puts
// before it ("Post \"http://…\": " says nothing to a user).
func transportCause(ce *connect.Error) string {
	err := ce.Unwrap()
	if err == nil {
		return ce.Message()
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	return err.Error()
}

// notConnected is the Unavailable status of a call that failed to connect,
// so sent nothing: another server may be asked (failsOver). It reads as
// the status it holds.
type notConnected struct{ st *status.Status }

func (e *notConnected) Error() string              { return e.st.Err().Error() }
func (e *notConnected) GRPCStatus() *status.Status { return e.st }
