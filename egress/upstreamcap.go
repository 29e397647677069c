package egress

import (
	"context"
	"fmt"
	"net"
	"sync"
)

// An inspected CONNECT is one client connection but may be several
// upstream ones: the child's HTTP/2 streams to an HTTP/1.1 upstream each
// need their own (up to 4). Each beyond the first counts against the
// rule's MaxConns and the server's Budget like a CONNECT of its own, and
// is given back when it closes.

// dialExtra dials addr for an inspected connection if the caps allow one
// more connection; the connection releases its place when closed.
func (p *Proxy) dialExtra(ctx context.Context, addr string) (net.Conn, error) {
	if err := p.acquireExtra(); err != nil {
		return nil, err
	}
	u, err := p.cfg.Dialer.DialContext(ctx, "tcp", addr)
	if err != nil {
		p.releaseExtra()
		return nil, err
	}
	return &extraConn{Conn: u, release: p.releaseExtra}, nil
}

func (p *Proxy) acquireExtra() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.closed:
		return ErrClosed
	case len(p.conns)+p.extra >= p.cfg.MaxConns:
		return fmt.Errorf("%d egress connections of rule %q are open, the most allowed (an inspected connection's further upstream connections count too)", p.cfg.MaxConns, p.cfg.Rule)
	case !p.cfg.Shared.acquire():
		return fmt.Errorf("the server's %d egress connections are all in use (rule %q)", p.cfg.Shared.Cap(), p.cfg.Rule)
	}
	p.extra++
	return nil
}

func (p *Proxy) releaseExtra() {
	p.mu.Lock()
	p.extra--
	p.mu.Unlock()
	p.cfg.Shared.release()
}

// extraConn gives its place back once, on its first Close.
type extraConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *extraConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}
