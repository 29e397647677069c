package client

import (
	"context"
	"errors"
	"io"
	"net"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	coilyv1 "coily.dev/coily/proto/coily/v1"
	"coily.dev/coily/refusal"
)

// execWithin runs c.Exec and fails the test if it has not returned within
// d.
func execWithin(t *testing.T, ctx context.Context, d time.Duration, c *Client, req *coilyv1.ExecRequest) (*coilyv1.ExecExit, error) {
	t.Helper()
	type res struct {
		exit *coilyv1.ExecExit
		err  error
	}
	done := make(chan res, 1)
	go func() {
		e, err := c.Exec(ctx, req, io.Discard, io.Discard)
		done <- res{e, err}
	}()
	select {
	case r := <-done:
		return r.exit, r.err
	case <-time.After(d):
		buf := make([]byte, 1<<16)
		n := runtime.Stack(buf, true)
		t.Fatalf("Exec did not return within %v (hang)\n%s", d, buf[:n])
		return nil, nil
	}
}

// rawServer is a peer on a unix socket that reads the client's HTTP/2
// preface and then does what serve says with the connection, frame by
// frame (x/net's framer: the client's HTTP/2 is Go's own, this is only
// the other side of a test). It returns the socket.
func rawServer(t *testing.T, serve func(c net.Conn, f *http2.Framer)) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "s")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				if _, err := io.ReadFull(c, make([]byte, len(http2.ClientPreface))); err != nil {
					return
				}
				serve(c, http2.NewFramer(c, c))
			}()
		}
	}()
	return sock
}

// TestCancelWhileSendBlocked: a peer that opens the windows, then stops
// reading (a wedged or SIGSTOPped server, or anything else on the socket)
// while a large stdin is sent: the sender blocks in write(2), and Ctrl-C
// must still end the call at once.
func TestCancelWhileSendBlocked(t *testing.T) {
	sock := rawServer(t, func(_ net.Conn, f *http2.Framer) {
		// Big windows, then never read again.
		_ = f.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1<<31 - 1})
		_ = f.WriteWindowUpdate(0, 1<<31-1-65535)
		<-t.Context().Done()
	})
	c, err := DialLocal(sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(500*time.Millisecond, cancel)
	_, err = execWithin(t, ctx, 5*time.Second, c, &coilyv1.ExecRequest{Argv: []string{"cat"}, Stdin: make([]byte, 1<<20)})
	var r *refusal.Error
	if !errors.As(err, &r) || status.Code(r.Detail) != codes.Canceled {
		t.Fatalf("got %v, want the call cancelled", err)
	}
}

// TestCancelDuringConnect: a listener whose accept queue is full (a
// wedged server) would make a blocking connect(2) wait; Ctrl-C must end
// the call. (Go's non-blocking connect is refused at once on Linux, which
// ends the call sooner still.)
func TestCancelDuringConnect(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "s")
	fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	if err := syscall.Bind(fd, &syscall.SockaddrUnix{Name: sock}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	// Fill the backlog (never accepted).
	for range 2 {
		c, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := syscall.SetNonblock(c, true); err != nil {
			t.Fatal(err)
		}
		defer syscall.Close(c)
		_ = syscall.Connect(c, &syscall.SockaddrUnix{Name: sock})
	}
	c, err := DialLocal(sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(300*time.Millisecond, cancel)
	if _, err := execWithin(t, ctx, 5*time.Second, c, &coilyv1.ExecRequest{Argv: []string{"true"}}); err == nil {
		t.Fatal("no error")
	}
}

// TestSilentSocket: something on the socket that accepts and says nothing
// fails the call as unreachable once the connect bound passes (at the
// Conn, TestConnectBounded); no socket at all fails at once, the same
// way.
func TestSilentSocket(t *testing.T) {
	sock := rawServer(t, func(net.Conn, *http2.Framer) { <-t.Context().Done() })
	c, err := DialLocal(sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.conn.open.timeout = 200 * time.Millisecond
	start := time.Now()
	_, err = execWithin(t, context.Background(), 10*time.Second, c, &coilyv1.ExecRequest{Argv: []string{"true"}})
	if !Unreachable(err) {
		t.Errorf("a silent socket: %v after %v", err, time.Since(start))
	}
	none, err := DialLocal(sock + ".none")
	if err != nil {
		t.Fatal(err)
	}
	defer none.Close()
	_, err = execWithin(t, context.Background(), 5*time.Second, none, &coilyv1.ExecRequest{Argv: []string{"true"}})
	if !Unreachable(err) || !strings.Contains(err.Error(), "connect: no such file") {
		t.Errorf("no socket: %v", err)
	}
}
