package vaulttest

import (
	"io"
	"net"
	"strings"
	"sync"
	"testing"
)

// Proxy is a way to a Server that a test can cut, to see what its code
// does when Vault goes away: a TCP proxy on loopback.
type Proxy struct {
	Addr string // "http://127.0.0.1:PORT", for VAULT_ADDR

	ln    net.Listener
	mu    sync.Mutex
	conns []net.Conn
	wg    sync.WaitGroup
}

// Proxy starts a proxy to s; it is cut at t's cleanup.
func (s *Server) Proxy(t testing.TB) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	to := strings.TrimPrefix(s.Addr, "http://")
	p := &Proxy{Addr: "http://" + ln.Addr().String(), ln: ln}
	p.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", to)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, u)
			p.mu.Unlock()
			p.wg.Go(func() { _, _ = io.Copy(u, c); u.Close() })
			p.wg.Go(func() { _, _ = io.Copy(c, u); c.Close() })
		}
	})
	t.Cleanup(p.Cut)
	return p
}

// Cut closes the proxy's listener and every connection through it: from
// then on Vault is unreachable at Addr (connections refused).
func (p *Proxy) Cut() {
	p.ln.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
	p.mu.Unlock()
	p.wg.Wait()
}
