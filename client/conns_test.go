package client

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// serverConns is a listener that keeps the server's side of every
// connection, to cut them as the kernel does when the server dies.
type serverConns struct {
	net.Listener
	mu    sync.Mutex
	conns []net.Conn
	cutAt int // if > 0, a connection dies after writing this many bytes
}

func (l *serverConns) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	if l.cutAt > 0 {
		c = &cutConn{Conn: c, left: l.cutAt}
	}
	l.mu.Lock()
	l.conns = append(l.conns, c)
	l.mu.Unlock()
	return c, nil
}

func (l *serverConns) cut() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range l.conns {
		c.Close()
	}
}

// cutConn dies after writing left bytes.
type cutConn struct {
	net.Conn
	left int
}

func (c *cutConn) Write(p []byte) (int, error) {
	if len(p) >= c.left {
		n, _ := c.Conn.Write(p[:c.left])
		c.Conn.Close()
		return n, net.ErrClosed
	}
	c.left -= len(p)
	return c.Conn.Write(p)
}

func serveOn(t *testing.T, ln net.Listener, handle func(grpc.ServerStream) error) {
	g := grpc.NewServer(grpc.UnknownServiceHandler(func(_ any, s grpc.ServerStream) error { return handle(s) }))
	go func() { _ = g.Serve(ln) }()
	t.Cleanup(g.Stop)
}

func unixConn(sock string, wrap func(net.Conn) net.Conn) *Conn {
	var d net.Dialer
	return newConn(func(ctx context.Context) (net.Conn, error) {
		c, err := d.DialContext(ctx, "unix", sock)
		if err != nil || wrap == nil {
			return c, err
		}
		return wrap(c), nil
	}, "localhost")
}

// TestConnectionLostIsUnavailable: a server that dies while a call waits
// for an answer, has sent one, or is in the middle of one, is Unavailable
// (exit 69 in the CLI, a retry in the bridge), never Internal (a
// definitive refusal).
func TestConnectionLostIsUnavailable(t *testing.T) {
	for _, tc := range []struct {
		name  string
		first bool // the server sends a message before dying
		cutAt int  // the connection dies inside an 8 MiB answer
	}{{"waiting", false, 0}, {"after a message", true, 0}, {"inside a message", false, 1 << 20}} {
		t.Run(tc.name, func(t *testing.T) {
			sock := t.TempDir() + "/s.sock"
			raw, err := net.Listen("unix", sock)
			if err != nil {
				t.Fatal(err)
			}
			ln := &serverConns{Listener: raw, cutAt: tc.cutAt}
			inCall := make(chan struct{})
			serveOn(t, ln, func(s grpc.ServerStream) error {
				_ = s.RecvMsg(new(wrapperspb.StringValue))
				if tc.cutAt > 0 {
					return s.SendMsg(wrapperspb.Bytes(make([]byte, 8<<20)))
				}
				if tc.first {
					_ = s.SendMsg(wrapperspb.String("first"))
				}
				close(inCall)
				<-s.Context().Done()
				return nil
			})
			c := unixConn(sock, nil)
			defer c.Close()
			ended := make(chan error, 1)
			go func() {
				// NewStream returns once the answer's headers come: a
				// server that has sent nothing yet holds it.
				s, err := c.NewStream(ctx(t), "/t.T/Wait", wrapperspb.String(""), newBytes, 64<<20)
				for err == nil {
					err = recvMsg(s, new(wrapperspb.BytesValue))
				}
				ended <- err
			}()
			if tc.cutAt == 0 {
				<-inCall
				ln.cut()
			}
			err = <-ended
			if status.Code(err) != codes.Unavailable {
				t.Errorf("got %v, want Unavailable", err)
			}
		})
	}
}

// TestCloseClosesTheConnection: after a call, Close closes the connection
// at once (tsnode's drain waits for that before the node stops), and a
// call still running when Close comes ends with its connection.
func TestCloseClosesTheConnection(t *testing.T) {
	sock := t.TempDir() + "/s.sock"
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	serveOn(t, ln, func(s grpc.ServerStream) error {
		in := new(wrapperspb.StringValue)
		if err := s.RecvMsg(in); err != nil {
			return err
		}
		if err := s.SendMsg(in); err != nil || in.GetValue() != "wait" {
			return err
		}
		<-s.Context().Done()
		return nil
	})
	for i := range 300 {
		var closed atomic.Int32
		c := unixConn(sock, func(nc net.Conn) net.Conn { return &closeCount{Conn: nc, n: &closed} })
		if err := c.Invoke(ctx(t), "/t.T/Echo", wrapperspb.String("x"), new(wrapperspb.StringValue)); err != nil {
			t.Fatal(err)
		}
		c.Close()
		if closed.Load() != 1 {
			t.Fatalf("round %d: Close after a finished call left its connection open", i)
		}
	}
	var closed atomic.Int32
	c := unixConn(sock, func(nc net.Conn) net.Conn { return &closeCount{Conn: nc, n: &closed} })
	s, err := c.NewStream(ctx(t), "/t.T/Echo", wrapperspb.String("wait"), newString, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := recvMsg(s, new(wrapperspb.StringValue)); err != nil {
		t.Fatal(err)
	}
	c.Close()
	if closed.Load() != 1 {
		t.Error("Close left a busy connection open")
	}
	if err := recvMsg(s, new(wrapperspb.StringValue)); status.Code(err) != codes.Unavailable {
		t.Errorf("a call cut by Close: %v", err)
	}
	if err := c.Invoke(ctx(t), "/t.T/Echo", wrapperspb.String("x"), new(wrapperspb.StringValue)); status.Code(err) != codes.Unavailable {
		t.Errorf("a call after Close: %v", err)
	}
}

type closeCount struct {
	net.Conn
	n    *atomic.Int32
	once sync.Once
}

func (c *closeCount) Close() error {
	c.once.Do(func() { c.n.Add(1) })
	return c.Conn.Close()
}

// TestConnectBounded: a dial that never completes (a tailnet peer powered
// off) and something on the socket that accepts and says nothing both
// fail the call with Unavailable once the connect timeout passes, as
// grpc-go's connect deadline does, instead of hanging the command.
func TestConnectBounded(t *testing.T) {
	sock := t.TempDir() + "/silent.sock"
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var held sync.WaitGroup
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			held.Go(func() { defer c.Close(); _, _ = c.Read(make([]byte, 1<<16)); <-t.Context().Done() })
		}
	}()
	blackhole := newConn(func(ctx context.Context) (net.Conn, error) { <-ctx.Done(); return nil, ctx.Err() }, "x")
	for name, c := range map[string]*Conn{"silent": unixConn(sock, nil), "blackhole": blackhole} {
		c.open.timeout = 300 * time.Millisecond
		start := time.Now()
		err := c.Invoke(ctx(t), "/t.T/X", wrapperspb.String(""), new(wrapperspb.StringValue))
		if status.Code(err) != codes.Unavailable || time.Since(start) > 10*time.Second {
			t.Errorf("%s: %v after %v, want Unavailable after the connect timeout", name, err, time.Since(start))
		}
		c.Close()
	}
}
