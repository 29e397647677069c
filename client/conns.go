package client

import (
	"context"
	"net"
	"sync"
	"time"
)

// connSet is the connections a Conn dialed and has not seen closed, so
// that Close closes them all, busy or not.
type connSet struct {
	timeout time.Duration // ConnectTimeout (shorter in tests)

	mu     sync.Mutex
	conns  map[*trackedConn]struct{}
	closed bool
}

// dial dials within ConnectTimeout and tracks the connection, whose first
// read must come within ConnectTimeout too (a server speaks first: its
// HTTP/2 settings).
func (s *connSet) dial(ctx context.Context, dial func(context.Context) (net.Conn, error)) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	c, err := dial(ctx)
	if err != nil {
		return nil, &dialFailed{err}
	}
	t := &trackedConn{Conn: c, set: s}
	_ = c.SetReadDeadline(time.Now().Add(s.timeout)) // some conns have none: then only the dial is bounded
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		c.Close()
		return nil, net.ErrClosed
	}
	s.conns[t] = struct{}{}
	return t, nil
}

func (s *connSet) closeAll() {
	s.mu.Lock()
	s.closed = true
	conns := make([]*trackedConn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
}

// trackedConn leaves its set when closed, and lifts the first-read
// deadline once the server has said something.
type trackedConn struct {
	net.Conn
	set   *connSet
	heard sync.Once
	close sync.Once
}

func (c *trackedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.heard.Do(func() { _ = c.Conn.SetReadDeadline(time.Time{}) })
	}
	return n, err
}

func (c *trackedConn) Close() error {
	err := c.Conn.Close()
	c.close.Do(func() {
		c.set.mu.Lock()
		delete(c.set.conns, c)
		c.set.mu.Unlock()
	})
	return err
}

// dialFailed is a failure to connect: nothing of any call was sent.
type dialFailed struct{ err error }

func (e *dialFailed) Error() string { return e.err.Error() }
func (e *dialFailed) Unwrap() error { return e.err }
