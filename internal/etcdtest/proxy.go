package etcdtest

import (
	"io"
	"net"
	"sync"
	"time"
)

// Proxy is a TCP proxy in front of one member's client URL, so a test can
// cut one client off the cluster (as etcd's own integration "bridge"
// does) while the others keep talking to it.
//
// Two partitions: Cut closes the connections (what a client sees when a
// peer's host resets them), Blackhole keeps them open and silent (what a
// link going down does: no FIN, no RST, the bytes held and delivered
// once it is up again, as TCP retransmits them), so the client learns of
// it only from its own timeouts.
type Proxy struct {
	ln     net.Listener
	target string

	mu     sync.Mutex
	moved  *sync.Cond // signalled when paused or closed changes
	cut    bool
	paused bool // blackholed: bytes held until Heal
	// stalled holds the client's bytes (not the member's) until Heal.
	stalled bool
	// delay is how late the member's bytes reach the client (Delay).
	delay  time.Duration
	closed bool
	conns  map[net.Conn]struct{} // both ends of every forwarded connection
	held   map[net.Conn]struct{} // accepted while cut: never forwarded
	wg     sync.WaitGroup
}

// listenLoopback is where a proxy listens unless told: a free port on
// 127.0.0.1.
func listenLoopback() (net.Listener, error) { return net.Listen("tcp", "127.0.0.1:0") }

// newProxy forwards what ln accepts to target; it owns ln.
func newProxy(ln net.Listener, target string) *Proxy {
	p := &Proxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}, held: map[net.Conn]struct{}{}}
	p.moved = sync.NewCond(&p.mu)
	p.wg.Add(1)
	go p.accept()
	return p
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

// Blackhole makes a partition as a link going down: every connection
// stays open but carries nothing, and new ones are accepted and carry
// nothing, until Heal, which delivers what was held.
func (p *Proxy) Blackhole() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.paused = true
}

// Stall makes a one-way partition: the client's bytes are held (its
// requests never reach the member) while the member's still flow (the
// answers to what it received before), until Heal.
func (p *Proxy) Stall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stalled = true
}

// Delay makes every byte the member sends reach the client d late (a
// slow answer: the member acted on the request when it received it),
// from the next byte read on; 0 ends it. Heal does not.
func (p *Proxy) Delay(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.delay = d
}

// Heal ends the partition: the connections held while cut are closed so
// the client dials again, those held while blackholed or stalled carry
// their bytes on, and new ones are forwarded.
func (p *Proxy) Heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = false
	p.paused = false
	p.stalled = false
	p.moved.Broadcast()
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
	p.moved.Broadcast()
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
		p.pipe(out, in, true)
		out.Close()
		close(done)
	}()
	p.pipeLate(in, out)
	in.Close()
	<-done
}

// pipe copies from src to dst, holding each read while the proxy is
// blackholed (or, for the client's bytes, up, stalled), until either side
// fails or the proxy closes.
func (p *Proxy) pipe(dst io.Writer, src io.Reader, up bool) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !p.open(up) {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// chunk is bytes read from the member, due to the client at due.
type chunk struct {
	due  time.Time
	data []byte
}

// pipeLate is pipe of the member's bytes, each written Delay after it
// was read, in order.
func (p *Proxy) pipeLate(dst io.Writer, src io.Reader) {
	late := make(chan chunk, 1024)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for c := range late {
			time.Sleep(time.Until(c.due)) // the delay simulated, not a wait for an event
			if !p.open(false) {
				return
			}
			if _, err := dst.Write(c.data); err != nil {
				return
			}
		}
	}()
	defer func() { <-done }()
	defer close(late)
	for {
		buf := make([]byte, 32<<10)
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			due := time.Now().Add(p.delay)
			p.mu.Unlock()
			select {
			case late <- chunk{due, buf[:n]}:
			case <-done:
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// open waits while the proxy is blackholed (or, up, stalled), and reports
// whether it is still open.
func (p *Proxy) open(up bool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for (p.paused || up && p.stalled) && !p.closed {
		p.moved.Wait()
	}
	return !p.closed
}

func (p *Proxy) drop(c net.Conn) {
	c.Close()
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

// Link is one client's way to the whole cluster: a proxy in front of
// every member, so that the client goes on while a member is down and can
// be cut off from all of them at once.
type Link struct{ proxies []*Proxy }

// Link starts a proxy in front of every member, member first's first
// (the client's preferred member), closed with the cluster.
func (c *Cluster) Link(first int) (*Link, error) { return c.LinkOn(first, listenLoopback) }

// LinkOn is Link with each proxy listening on what listen returns: e.g. a
// socket made inside a network namespace of the test's, on ForwardAddr,
// that only a client in a namespace joined to it reaches. The proxies
// dial the members from the test's own namespace.
func (c *Cluster) LinkOn(first int, listen func() (net.Listener, error)) (*Link, error) {
	l := &Link{}
	for k := range c.members {
		p, err := c.proxyOn((first+k)%len(c.members), listen)
		if err != nil {
			l.Close()
			return nil, err
		}
		l.proxies = append(l.proxies, p)
	}
	return l, nil
}

// Endpoints are the proxies' client URLs, to give the etcd client.
func (l *Link) Endpoints() []string {
	var out []string
	for _, p := range l.proxies {
		out = append(out, p.Endpoint())
	}
	return out
}

// Cut cuts every proxy of the link (Proxy.Cut).
func (l *Link) Cut() { l.each((*Proxy).Cut) }

// Blackhole blackholes every proxy of the link (Proxy.Blackhole).
func (l *Link) Blackhole() { l.each((*Proxy).Blackhole) }

// Stall stalls every proxy of the link (Proxy.Stall).
func (l *Link) Stall() { l.each((*Proxy).Stall) }

// Delay delays every proxy of the link (Proxy.Delay).
func (l *Link) Delay(d time.Duration) {
	l.each(func(p *Proxy) { p.Delay(d) })
}

// Heal heals every proxy of the link.
func (l *Link) Heal() { l.each((*Proxy).Heal) }

// Close closes every proxy of the link.
func (l *Link) Close() { l.each((*Proxy).Close) }

func (l *Link) each(f func(*Proxy)) {
	for _, p := range l.proxies {
		f(p)
	}
}
