package etcdtest

import (
	"fmt"
	"io"
	"net"
	"sync"
)

// Proxy is a TCP proxy in front of one member's client URL, so a test can
// cut one client off the cluster (as etcd's own integration "bridge"
// does) while the others keep talking to it.
type Proxy struct {
	ln     net.Listener
	target string

	mu     sync.Mutex
	cut    bool
	closed bool
	conns  map[net.Conn]struct{} // both ends of every forwarded connection
	held   map[net.Conn]struct{} // accepted while cut: never forwarded
	wg     sync.WaitGroup
}

func newProxy(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("etcdtest: proxy: %w", err)
	}
	p := &Proxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}, held: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Endpoint is the proxy's client URL, to give the etcd client in place of
// the member's.
func (p *Proxy) Endpoint() string { return "https://" + p.ln.Addr().String() }

// Cut makes a partition: every connection through the proxy is closed, and
// new ones are accepted but carry nothing (a dial hangs in its TLS
// handshake, as behind a dead link), until Heal.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for c := range p.conns {
		c.Close()
	}
}

// Heal ends the partition: the connections held while cut are closed so
// the client dials again, and new ones are forwarded.
func (p *Proxy) Heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = false
	for c := range p.held {
		c.Close()
		delete(p.held, c)
	}
}

// Close stops the proxy and closes every connection it holds.
func (p *Proxy) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	p.ln.Close()
	for c := range p.conns {
		c.Close()
	}
	for c := range p.held {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		switch {
		case p.closed:
			in.Close()
		case p.cut:
			p.held[in] = struct{}{}
		default:
			p.conns[in] = struct{}{}
			p.wg.Add(1)
			go p.forward(in)
		}
		p.mu.Unlock()
	}
}

// forward copies between in and a new connection to the target until
// either side closes (or Cut closes both).
func (p *Proxy) forward(in net.Conn) {
	defer p.wg.Done()
	defer p.drop(in)
	out, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	p.mu.Lock()
	if p.cut || p.closed {
		p.mu.Unlock()
		out.Close()
		return
	}
	p.conns[out] = struct{}{}
	p.mu.Unlock()
	defer p.drop(out)
	done := make(chan struct{})
	go func() {
		io.Copy(out, in)
		out.Close()
		close(done)
	}()
	io.Copy(in, out)
	in.Close()
	<-done
}

func (p *Proxy) drop(c net.Conn) {
	c.Close()
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}
