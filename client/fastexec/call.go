// Package fastexec is the Exec call of coily-exec, the client a shim
// starts for every command an agent types: one Exec of the coily API on
// the local socket, written so that the process does almost nothing but
// the call. It speaks the gRPC protocol over HTTP/2 by hand (RFC 9113 for
// one stream: settings, flow control both ways, header blocks through
// hpack, pings, resets, going away) and reads and writes the few messages
// an Exec needs with protowire. The general client (package client, over
// net/http and the generated types) does everything else; coily-exec
// hands any case but the plain one to it. docs/benchmarks.md says why: a
// process per command spends more starting up than the trust point spends
// running the command, unless it links next to nothing.
package fastexec

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	"coily.dev/coily/client/grpcwire"
	"golang.org/x/net/http2/hpack"
)

// refusalDomain is the domain of coily's ErrorInfo (package refusal).
const refusalDomain = "coily.dev"

// execPath is the Exec method (proto/coily/v1/service.proto).
const execPath = "/coily.v1.CoilyService/Exec"

// MaxMessage bounds one answer, as gRPC's default does.
const MaxMessage = 4 << 20

// FirstFrameTimeout bounds the wait for the server's first frame (its
// settings, sent as soon as it accepts), as the general client's
// connect timeout does: something on the socket that accepts and says
// nothing fails the call (Unavailable) instead of hanging the command.
const FirstFrameTimeout = 20 * time.Second

// gRPC status codes this client names.
const (
	codeOK                = grpcwire.OK
	codeCanceled          = grpcwire.Canceled
	codeUnknown           = grpcwire.Unknown
	codeInvalidArgument   = grpcwire.InvalidArgument
	codeResourceExhausted = grpcwire.ResourceExhausted
	codePermissionDenied  = grpcwire.PermissionDenied
	codeInternal          = grpcwire.Internal
	codeUnavailable       = grpcwire.Unavailable
	codeUnauthenticated   = grpcwire.Unauthenticated
)

// StatusError is a call that did not end with an exit event: the
// server's status (a refusal), or a failure to reach it.
type StatusError struct {
	Code       int32  // the gRPC code
	Message    string // the server's message (untrusted text)
	Reason     string // the refusal code from coily's ErrorInfo, if any
	RetryAfter time.Duration
}

func (e *StatusError) Error() string { return e.Message }

// Refusal is the refusal code, as refusal.FromStatus reads it: the
// ErrorInfo's reason, else one derived from the gRPC code.
func (e *StatusError) Refusal() string {
	if e.Reason != "" {
		return e.Reason
	}
	switch e.Code {
	case codeUnauthenticated:
		return "unauthenticated"
	case codePermissionDenied:
		return "permission-denied"
	case codeInvalidArgument, codeResourceExhausted:
		return "bad-request"
	}
	return "internal"
}

// Unreachable says the server could not be reached or the connection was
// lost: Unavailable without coily's ErrorInfo (client.Unreachable).
func (e *StatusError) Unreachable() bool { return e.Code == codeUnavailable && e.Reason == "" }

// Call is one Exec on the server's local socket.
type Call struct {
	Socket         string
	Stdout, Stderr io.Writer
	// OnApproval is told when the command waits for a human's approval.
	OnApproval func(Approval)
	// FirstFrame bounds the wait for the server's first frame (0:
	// FirstFrameTimeout).
	FirstFrame time.Duration
}

// Exec runs req and returns its exit event, or a *StatusError. Cancelling
// ctx resets the stream, which cancels the command on the server, and
// returns at once (Canceled).
func (c Call) Exec(ctx context.Context, req Request) (*Exit, error) {
	wait := c.FirstFrame
	if wait <= 0 {
		wait = FirstFrameTimeout
	}
	f, err := dialUnix(ctx, c.Socket, wait)
	if err != nil {
		if ctx.Err() != nil {
			return nil, &StatusError{Code: codeCanceled, Message: "cancelled"}
		}
		return nil, &StatusError{Code: codeUnavailable, Message: "connection error: " + err.Error()}
	}
	defer f.Close()
	h := newH2(f, f)
	var cancelled atomic.Bool
	stop := context.AfterFunc(ctx, func() {
		cancelled.Store(true)
		h.tryReset(f)
		_ = shutdown(f) // wakes the read, and a write blocked on a server that stopped reading
	})
	defer stop()
	var silent atomic.Bool
	timer := time.AfterFunc(wait, func() {
		if !h.heard.Load() {
			silent.Store(true)
			_ = shutdown(f)
		}
	})
	defer timer.Stop()
	if err := h.start(execPath, "localhost"); err != nil {
		return nil, lostError(ctx, err)
	}
	msg := req.marshal()
	body := make([]byte, 5, 5+len(msg))
	binary.BigEndian.PutUint32(body[1:], uint32(len(msg)))
	body = append(body, msg...)
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		_ = h.send(body) // a failure shows in the read
	}()
	exit, err := c.read(ctx, h)
	// The call is over: nothing more goes either way (a sender still
	// waiting for a window, or blocked writing, is released).
	h.closeSend()
	_ = shutdown(f)
	<-sent
	switch {
	case err != nil && cancelled.Load():
		return nil, &StatusError{Code: codeCanceled, Message: "cancelled"}
	case err != nil && silent.Load():
		return nil, &StatusError{Code: codeUnavailable, Message: fmt.Sprintf("connection error: %s accepted but said nothing within %v", c.Socket, wait)}
	}
	return exit, err
}

// read reads the answer until the exit event or the call's status.
func (c Call) read(ctx context.Context, h *h2) (*Exit, error) {
	var buf []byte
	headers := false
	for {
		ev, err := h.next()
		if err != nil {
			return nil, lostError(ctx, err)
		}
		if ev.headers != nil {
			if !headers {
				headers = true
				if err := checkHeaders(ev.headers); err != nil {
					return nil, err
				}
				if !ev.endStream {
					continue
				}
			} else if !ev.endStream {
				return nil, lostError(ctx, fmt.Errorf("%w: a third header block", errProtocol))
			}
			if err := trailerStatus(ev.headers); err != nil {
				return nil, err
			}
			return nil, &StatusError{Code: codeInternal, Message: "server ended the stream without an exit status"}
		}
		if !headers {
			return nil, lostError(ctx, fmt.Errorf("%w: data before headers", errProtocol))
		}
		buf = append(buf, ev.data...)
		for len(buf) >= 5 {
			n := binary.BigEndian.Uint32(buf[1:5])
			switch {
			case buf[0] != 0:
				return nil, &StatusError{Code: codeInternal, Message: "the server sent a compressed message though none was asked for"}
			case n > MaxMessage:
				return nil, &StatusError{Code: codeResourceExhausted, Message: fmt.Sprintf("received message larger than max (%d vs. %d)", n, MaxMessage)}
			case len(buf) < 5+int(n):
			default:
				exit, err := c.handle(buf[5 : 5+n])
				if err != nil || exit != nil {
					return exit, err
				}
				buf = buf[5+n:]
				continue
			}
			break
		}
		if ev.endStream {
			return nil, &StatusError{Code: codeInternal, Message: "the server ended the stream without a status"}
		}
	}
}

// handle acts on one ExecResponse; the exit event ends the call.
func (c Call) handle(msg []byte) (*Exit, error) {
	r, err := unmarshalResponse(msg)
	if err != nil {
		return nil, &StatusError{Code: codeInternal, Message: "unmarshal the answer: " + err.Error()}
	}
	switch {
	case r.exit != nil:
		return r.exit, nil
	case r.output != nil:
		w := c.Stdout
		if r.stderr {
			w = c.Stderr
		}
		if _, err := w.Write(r.output); err != nil {
			// As the general client does: stop, which cancels the command.
			return nil, fmt.Errorf("write output: %w", err)
		}
	case r.approval != nil && c.OnApproval != nil:
		c.OnApproval(*r.approval)
	}
	return nil, nil
}

// checkHeaders checks the answer's headers: HTTP 200 and gRPC's content
// type, as grpc-go's client does.
func checkHeaders(fields []hpack.HeaderField) error {
	st, _ := header(fields, ":status")
	if st != "200" {
		n, _ := strconv.Atoi(st)
		return &StatusError{Code: int32(grpcwire.HTTPCode(n)), Message: "unexpected HTTP status " + strconv.Quote(st)}
	}
	ct, _ := header(fields, "content-type")
	if !grpcwire.IsContentType(ct) {
		return &StatusError{Code: codeUnknown, Message: "unexpected content type " + strconv.Quote(ct)}
	}
	return nil
}

// trailerStatus reads the status a header block ends the call with: nil
// for OK.
func trailerStatus(fields []hpack.HeaderField) error {
	v, ok := header(fields, "grpc-status")
	if !ok {
		return &StatusError{Code: codeInternal, Message: "the server ended the stream without a status"}
	}
	code, err := strconv.ParseUint(v, 10, 31)
	if err != nil {
		return &StatusError{Code: codeInternal, Message: "malformed grpc-status " + strconv.Quote(v)}
	}
	msg, _ := header(fields, "grpc-message")
	e := &StatusError{Code: int32(code), Message: grpcwire.DecodeMessage(msg)}
	if bin, ok := header(fields, "grpc-status-details-bin"); ok {
		raw, err := grpcwire.DecodeBinary(bin)
		if err != nil {
			return &StatusError{Code: codeInternal, Message: "malformed grpc-status-details-bin"}
		}
		d, err := unmarshalStatus(raw)
		if err != nil {
			return &StatusError{Code: codeInternal, Message: "malformed grpc-status-details-bin"}
		}
		if d.code != e.Code {
			return &StatusError{Code: codeInternal, Message: fmt.Sprintf("grpc-status-details-bin code %d does not match grpc-status %d", d.code, e.Code)}
		}
		e.Message, e.Reason, e.RetryAfter = d.message, d.reason, d.retryAfter
	}
	if e.Code == codeOK {
		return nil
	}
	return e
}

// lostError is the status of a call whose connection failed: Canceled
// when ctx ended it, else Unavailable (a lost or broken connection: the
// CLI's exit 69).
func lostError(ctx context.Context, err error) error {
	var st *StatusError
	switch {
	case errors.As(err, &st):
		return st
	case ctx.Err() != nil:
		return &StatusError{Code: codeCanceled, Message: "cancelled"}
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return &StatusError{Code: codeUnavailable, Message: "connection lost"}
	}
	return &StatusError{Code: codeUnavailable, Message: "connection error: " + err.Error()}
}

// dialUnix connects to a unix socket and returns it as a blocking file (no
// network poller to start). The connect itself does not block: a server
// whose queue of connections to accept is full is tried again every 10
// ms, until ctx ends or wait passes.
func dialUnix(ctx context.Context, path string, wait time.Duration) (*os.File, error) {
	fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	if err != nil {
		return nil, fmt.Errorf("dial unix %s: %w", path, err)
	}
	syscall.CloseOnExec(fd)
	if err := connectUnix(ctx, fd, path, wait); err != nil {
		syscall.Close(fd)
		return nil, fmt.Errorf("dial unix %s: connect: %w", path, err) // as net.Dial says it
	}
	return os.NewFile(uintptr(fd), path), nil
}

func connectUnix(ctx context.Context, fd int, path string, wait time.Duration) error {
	if err := syscall.SetNonblock(fd, true); err != nil {
		return err
	}
	deadline := time.Now().Add(wait)
	for {
		err := syscall.Connect(fd, &syscall.SockaddrUnix{Name: path})
		switch {
		case err == nil || err == syscall.EISCONN:
			return syscall.SetNonblock(fd, false)
		case err != syscall.EAGAIN && err != syscall.EINPROGRESS && err != syscall.EALREADY && err != syscall.EINTR:
			return err
		case ctx.Err() != nil:
			return ctx.Err()
		case time.Now().After(deadline):
			return fmt.Errorf("the server accepted no connection within %v", wait)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// shutdown ends both directions of the socket, waking a blocked read.
func shutdown(f *os.File) error {
	raw, err := f.SyscallConn()
	if err != nil {
		return err
	}
	return raw.Control(func(fd uintptr) { _ = syscall.Shutdown(int(fd), syscall.SHUT_RDWR) })
}
