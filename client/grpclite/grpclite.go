// Package grpclite makes gRPC calls (unary, and a single request with the
// answer streamed back) over the standard library's HTTP/2 without
// prior knowledge, instead of grpc-go: the lean client (coily-client, the
// shims) starts a process per command, and grpc-go's initialisation alone
// cost more than the 1.3× budget of a whole CLI exec (docs/benchmarks.md).
//
// It speaks the gRPC-over-HTTP/2 protocol
// (https://github.com/grpc/grpc/blob/master/doc/PROTOCOL-HTTP2.md) as far
// as those two call shapes need: length-prefixed uncompressed messages,
// grpc-timeout, the status in trailers (or in the headers of a
// trailers-only answer), grpc-message percent-decoded and
// grpc-status-details-bin as a google.rpc.Status. Errors are grpc status
// errors (google.golang.org/grpc/status, which does not link grpc-go's
// transport), so callers read codes and details as they would from
// grpc-go. net/http does the HTTP/2 framing, flow control and stream
// cancellation: cancelling a call's context resets its stream, which the
// server sees as the call's cancellation.
package grpclite

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"coily.dev/coily/client/grpcwire"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// DefaultMaxRecvSize bounds one received message unless the call says
// otherwise (MaxRecvSize), as grpc-go's client does by default: a larger
// one fails the call (ResourceExhausted) before it is read.
const DefaultMaxRecvSize = 4 << 20

// ConnectTimeout bounds connecting to the server and hearing its first
// bytes (its HTTP/2 settings), as grpc-go's connect deadline does: a dial
// that never completes, or something on the socket that accepts and says
// nothing, fails the call with Unavailable instead of hanging it.
const ConnectTimeout = 20 * time.Second

// Conn makes calls over HTTP/2 connections it dials itself: one at a time
// is kept open and reused by later calls.
type Conn struct {
	tr        *http.Transport
	client    *http.Client
	authority string
	open      *connSet
}

// New returns a Conn whose connections come from dial; authority is the
// :authority of every call ("localhost" for a unix socket, as grpc-go
// sends, or the server's host:port).
func New(dial func(ctx context.Context) (net.Conn, error), authority string) *Conn {
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
	return &Conn{tr: tr, client: &http.Client{Transport: tr, CheckRedirect: noRedirect}, authority: authority, open: open}
}

// Close closes every connection, as grpc-go's ClientConn.Close does: a
// call still running fails (Unavailable).
func (c *Conn) Close() error {
	c.tr.CloseIdleConnections()
	c.open.closeAll()
	return nil
}

// CallOption sets something for one call.
type CallOption func(*callOptions)

type callOptions struct{ maxRecv int }

// MaxRecvSize bounds one message the call receives (instead of
// DefaultMaxRecvSize).
func MaxRecvSize(n int) CallOption { return func(o *callOptions) { o.maxRecv = n } }

// Invoke makes a unary call: method is the full name
// ("/coily.v1.CoilyService/Status"); the answer is unmarshalled into resp.
func (c *Conn) Invoke(ctx context.Context, method string, req, resp proto.Message, opts ...CallOption) error {
	s, err := c.NewStream(ctx, method, req, opts...)
	if err != nil {
		return err
	}
	defer s.Close()
	if err := s.RecvMsg(resp); err != nil {
		if err == io.EOF {
			return status.Error(codes.Internal, "grpclite: the server ended a unary call without an answer")
		}
		return err
	}
	if err := s.RecvMsg(resp.ProtoReflect().New().Interface()); err != io.EOF {
		if err == nil {
			return status.Error(codes.Internal, "grpclite: the server sent more than one answer to a unary call")
		}
		return err
	}
	return nil
}

// NewStream sends req as the call's only message and returns the stream
// of answers (a unary call's single answer included) once the answer's
// headers have come; its error is a failure to reach the server, and the
// server's status comes from RecvMsg. A stream read to its end is
// released; one left before must be closed, which cancels the call.
func (c *Conn) NewStream(ctx context.Context, method string, req proto.Message, opts ...CallOption) (*Stream, error) {
	o := callOptions{maxRecv: DefaultMaxRecvSize}
	for _, opt := range opts {
		opt(&o)
	}
	if !strings.HasPrefix(method, "/") {
		return nil, status.Errorf(codes.Internal, "grpclite: method %q: want /package.Service/Method", method)
	}
	body, err := frame(req)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "grpclite: marshal the request: %v", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+c.authority+method, bytes.NewReader(body))
	if err != nil {
		cancel()
		return nil, status.Errorf(codes.Internal, "grpclite: %v", err)
	}
	hreq.Header["Content-Type"] = []string{"application/grpc+proto"}
	hreq.Header["Te"] = []string{"trailers"}
	hreq.Header["User-Agent"] = []string{"coily-grpclite"}
	if d, ok := ctx.Deadline(); ok {
		hreq.Header["Grpc-Timeout"] = []string{timeout(time.Until(d))}
	}
	resp, err := c.client.Do(hreq)
	if err != nil {
		err = transportError(ctx, err)
		cancel()
		return nil, err
	}
	s := &Stream{ctx: ctx, cancel: cancel, resp: resp, max: o.maxRecv}
	// As with grpc-go, what the server answered (a refusal in a
	// trailers-only answer too) is read by RecvMsg; only a call that
	// reached no server fails here.
	s.checkHeaders()
	return s, nil
}

// Stream is the answers of one call.
type Stream struct {
	ctx    context.Context
	cancel context.CancelFunc
	resp   *http.Response
	done   error // set once the status is known: io.EOF for OK
	max    int
	head   [5]byte
}

// RecvMsg reads the next answer into m. At the end of the call it returns
// io.EOF when the status is OK, else the status as an error.
func (s *Stream) RecvMsg(m proto.Message) error {
	if s.done != nil {
		return s.done
	}
	body := &lastErr{r: s.resp.Body}
	if _, err := io.ReadFull(body, s.head[:]); err != nil {
		switch {
		case err == io.EOF:
			return s.finish(trailerStatus(s.resp.Trailer))
		case body.err == io.EOF: // the stream's clean end, inside the prefix
			return s.finish(status.Error(codes.Internal, "grpclite: the stream ended inside a message"))
		}
		return s.finish(s.readError(body.err))
	}
	n := binary.BigEndian.Uint32(s.head[1:])
	switch {
	case s.head[0] != 0:
		return s.finish(status.Errorf(codes.Internal, "grpclite: the server sent a compressed message (flag %d) though none was asked for", s.head[0]))
	case uint64(n) > uint64(s.max):
		return s.finish(status.Errorf(codes.ResourceExhausted, "grpclite: received message larger than max (%d vs. %d)", n, s.max))
	}
	buf := make([]byte, n)
	if _, err := io.ReadFull(body, buf); err != nil {
		if body.err == io.EOF {
			return s.finish(status.Error(codes.Internal, "grpclite: the stream ended inside a message"))
		}
		return s.finish(s.readError(body.err))
	}
	if err := proto.Unmarshal(buf, m); err != nil {
		return s.finish(status.Errorf(codes.Internal, "grpclite: unmarshal the answer: %v", err))
	}
	return nil
}

// Close ends the call, cancelling it on the server if it still runs.
func (s *Stream) Close() {
	// The body first: closed before the context ends, it waits until the
	// stream is reset and forgotten, so the connection is idle after.
	s.resp.Body.Close()
	s.cancel()
}

// finish records the call's outcome (io.EOF for an OK status) and
// releases the call: a stream read to its end needs no Close.
func (s *Stream) finish(err error) error {
	if err == nil {
		err = io.EOF
	}
	s.done = err
	s.Close()
	return err
}

// readError is the status of a failed read: the context's when it ended
// the call, else the connection's failure (Unavailable, as grpc-go says).
func (s *Stream) readError(err error) error {
	return transportError(s.ctx, err)
}

// checkHeaders reads the answer's headers: an HTTP error, a content type
// other than gRPC's, or a trailers-only answer (the status in the
// headers, no message) ends the call at once, with that status.
func (s *Stream) checkHeaders() error {
	r := s.resp
	if r.StatusCode != http.StatusOK {
		return s.finish(status.Errorf(codes.Code(grpcwire.HTTPCode(r.StatusCode)), "grpclite: unexpected HTTP status %d", r.StatusCode))
	}
	ct := r.Header.Get("Content-Type")
	if !grpcwire.IsContentType(ct) {
		return s.finish(status.Errorf(codes.Unknown, "grpclite: unexpected content type %q", ct))
	}
	if _, ok := r.Header["Grpc-Status"]; ok {
		err := headerStatus(r.Header)
		if err == nil {
			// Trailers-only with OK: no answer, a clean end.
			s.finish(nil)
			return nil
		}
		return s.finish(err)
	}
	return nil
}

// trailerStatus reads the status from the trailers that ended a stream.
func trailerStatus(tr http.Header) error {
	if _, ok := tr["Grpc-Status"]; !ok {
		return status.Error(codes.Internal, "grpclite: the server ended the stream without a status")
	}
	return headerStatus(tr)
}

// headerStatus reads grpc-status, grpc-message and
// grpc-status-details-bin. The details, when present, must name the same
// code; a status that cannot be read is Internal.
func headerStatus(h http.Header) error {
	code, err := strconv.ParseUint(h.Get("Grpc-Status"), 10, 32)
	if err != nil {
		return status.Errorf(codes.Internal, "grpclite: malformed grpc-status %q", h.Get("Grpc-Status"))
	}
	msg := grpcwire.DecodeMessage(h.Get("Grpc-Message"))
	bin := h.Get("Grpc-Status-Details-Bin")
	if bin == "" {
		if code == 0 {
			return nil
		}
		return status.Error(codes.Code(code), msg)
	}
	raw, err := grpcwire.DecodeBinary(bin)
	if err != nil {
		return status.Errorf(codes.Internal, "grpclite: malformed grpc-status-details-bin: %v", err)
	}
	st := new(spb.Status)
	if err := proto.Unmarshal(raw, st); err != nil {
		return status.Errorf(codes.Internal, "grpclite: malformed grpc-status-details-bin: %v", err)
	}
	if uint64(st.GetCode()) != code {
		return status.Errorf(codes.Internal, "grpclite: grpc-status-details-bin code %d does not match grpc-status %d", st.GetCode(), code)
	}
	if code == 0 {
		return nil
	}
	return status.ErrorProto(st)
}

// frame is req as a gRPC message: a zero flag byte, the length, the bytes.
func frame(req proto.Message) ([]byte, error) {
	b := make([]byte, 5, 5+proto.Size(req))
	// The size is known now: the marshal need not work it out again.
	b, err := proto.MarshalOptions{UseCachedSize: true}.MarshalAppend(b, req)
	if err != nil {
		return nil, err
	}
	if len(b)-5 > 1<<31-1 {
		return nil, errors.New("request too large")
	}
	binary.BigEndian.PutUint32(b[1:5], uint32(len(b)-5))
	return b, nil
}

// timeout is grpc-timeout's value for d: at most eight digits, in the
// finest unit that fits.
func timeout(d time.Duration) string {
	if d <= 0 {
		return "1n"
	}
	for _, u := range []struct {
		unit string
		size time.Duration
	}{{"n", time.Nanosecond}, {"u", time.Microsecond}, {"m", time.Millisecond}, {"S", time.Second}, {"M", time.Minute}} {
		if v := ceilDiv(d, u.size); v < 1e8 {
			return strconv.FormatInt(int64(v), 10) + u.unit
		}
	}
	return strconv.FormatInt(int64(min(ceilDiv(d, time.Hour), 1e8-1)), 10) + "H"
}

// ceilDiv is d/unit rounded up, without overflowing.
func ceilDiv(d, unit time.Duration) time.Duration {
	v := d / unit
	if d%unit != 0 {
		v++
	}
	return v
}

// transportError is the status of a call that failed below gRPC: the
// context's when it was cancelled or ran out, else Unavailable.
func transportError(ctx context.Context, err error) error {
	switch ctx.Err() {
	case context.Canceled:
		return status.Error(codes.Canceled, context.Canceled.Error())
	case context.DeadlineExceeded:
		return status.Error(codes.DeadlineExceeded, context.DeadlineExceeded.Error())
	}
	var ue *url.Error // "Post \"http://…\": " says nothing to a user
	if errors.As(err, &ue) {
		err = ue.Err
	}
	return status.Error(codes.Unavailable, fmt.Sprintf("connection error: %v", err))
}

// lastErr keeps the last error of the body's own Read: net/http reports a
// lost connection as io.ErrUnexpectedEOF, which io.ReadFull also makes of
// the stream's clean end inside a message; only the latter is the
// server's doing (Internal), the former is the connection's (Unavailable).
type lastErr struct {
	r   io.Reader
	err error
}

func (l *lastErr) Read(p []byte) (int, error) {
	n, err := l.r.Read(p)
	if err != nil {
		l.err = err
	}
	return n, err
}
