package httpserve

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"

	"coily.dev/coily/access"
	"coily.dev/coily/audit"
	"coily.dev/coily/recorder"
	"coily.dev/coily/refusal"
)

// Connections per peer (Limits.PeerConns). A peer that holds its cap
// of connections open gets each new one closed as soon as it is accepted,
// before a byte of it is read, whoever the peer is: the cap is counted
// per address, so it needs no identity, and an owner's device is not
// held up by another's. Every refusal is counted in coily_refusals_total
// (code rate-limit). They are audited per peer and recorder.Window: the first
// at once, through access's Gate.Refuse (the peer identified by WhoIs where it can
// be, and the flood accounting of every refusal applied), the others of
// the window as one refusal.summary when it ends or the server closes.
// So a flood of connections adds at most two records per peer and window
// to the log.

// connRefusalMsg is the refusal's message; %d is the cap.
const connRefusalMsg = "too many connections from this peer: at most %d open at once"

// maxConnWindows bounds the peers whose refusals are counted at once;
// past it, the newcomers share one count (the zero address's).
const maxConnWindows = 4096

// Gate identifies a refused peer and audits its first refusal of a
// window (access.Gate).
type Gate interface {
	Tailnet(ctx context.Context, remote string) (access.Caller, error)
	Refuse(ctx context.Context, c access.Caller, method string, err error) error
}

// Appender writes a window's summary (recorder.Recorder).
type Appender interface {
	Append(ctx context.Context, rec audit.Record, durable bool) (audit.Record, error)
}

// Cap is how one server's connections past their peer's cap are counted
// and audited. Every field is required.
type Cap struct {
	// Transport and Method name the refusals in the audit.
	Transport, Method string
	Gate              Gate
	Audit             Appender
	// Refused counts a refusal the gate does not record (the metrics'
	// coily_refusals_total).
	Refused func(code string)
	Now     func() time.Time
	Log     *slog.Logger
}

// peerConns caps the connections of one HTTP server per peer address
// (its ConnState hook).
type peerConns struct {
	cfg        Cap
	max        int
	window     time.Duration // recorder.Window
	maxWindows int           // maxConnWindows

	mu      sync.Mutex
	open    map[netip.Addr]int
	held    map[net.Conn]netip.Addr
	windows map[netip.Addr]*connWindow
	closed  bool
	wg      sync.WaitGroup // records being written, summaries scheduled
}

// connWindow is one peer's refused connections in the current window.
type connWindow struct {
	start       time.Time
	caller      access.Caller // the peer, identified once its first refusal is
	more        int           // refusals after the first, not yet recorded
	first, last time.Time
	timer       *time.Timer // writes the summary of more at the window's end
}

func newPeerConns(cfg Cap, max int) *peerConns {
	return &peerConns{cfg: cfg, max: max, window: recorder.Window, maxWindows: maxConnWindows,
		open: map[netip.Addr]int{}, held: map[net.Conn]netip.Addr{}, windows: map[netip.Addr]*connWindow{}}
}

// connState is the http.Server's ConnState hook.
func (p *peerConns) connState(c net.Conn, st http.ConnState) {
	switch st {
	case http.StateNew:
		if !p.take(c) {
			remote := c.RemoteAddr() // before the close: some connections forget it then
			c.Close()
			p.refuse(remote)
		}
	case http.StateClosed, http.StateHijacked:
		p.release(c)
	}
}

// take counts c against its peer's cap, or reports that the peer holds it.
func (p *peerConns) take(c net.Conn) bool {
	addr := peerAddr(c.RemoteAddr())
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.open[addr] >= p.max {
		return false
	}
	p.open[addr]++
	p.held[c] = addr
	return true
}

// release uncounts c, if it was counted.
func (p *peerConns) release(c net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	addr, ok := p.held[c]
	if !ok {
		return
	}
	delete(p.held, c)
	if p.open[addr]--; p.open[addr] <= 0 {
		delete(p.open, addr)
	}
}

// peerAddr is the address a connection's peer is counted by: its IP,
// without port or zone; the zero address for one that has none.
func peerAddr(a net.Addr) netip.Addr {
	if a == nil {
		return netip.Addr{}
	}
	ap, err := netip.ParseAddrPort(a.String())
	if err != nil {
		return netip.Addr{}
	}
	return ap.Addr().Unmap().WithZone("")
}

// refuse counts one refused connection from remote, and audits it if it
// is its peer's first in the window.
func (p *peerConns) refuse(remote net.Addr) {
	peer := "(unknown)"
	if remote != nil {
		peer = remote.String()
	}
	addr, now := peerAddr(remote), p.cfg.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		p.cfg.Refused(string(refusal.RateLimit)) // closing: counted, not recorded
		return
	}
	if w := p.windowLocked(&addr, now); w != nil {
		p.cfg.Refused(string(refusal.RateLimit)) // recorded in the window's summary
		p.countLocked(addr, w, now)
		return
	}
	w := &connWindow{start: now, caller: access.Caller{Transport: p.cfg.Transport, Peer: peer}}
	p.windows[addr] = w
	p.wg.Add(1)
	go p.recordFirst(w, peer)
}

// windowLocked returns the window of *addr's peer, nil if none is open.
// Past maxConnWindows peers, *addr becomes the zero address, whose
// window the newcomers share.
func (p *peerConns) windowLocked(addr *netip.Addr, now time.Time) *connWindow {
	open := func(w *connWindow) *connWindow {
		if w != nil && now.Sub(w.start) < p.window {
			return w
		}
		return nil
	}
	if w, ok := p.windows[*addr]; ok || len(p.windows) < p.maxWindows {
		return open(w)
	}
	p.pruneLocked(now)
	if len(p.windows) >= p.maxWindows {
		*addr = netip.Addr{}
		return open(p.windows[*addr])
	}
	return nil
}

// countLocked counts a refusal of w's peer past the window's first; the
// first such schedules the window's summary.
func (p *peerConns) countLocked(addr netip.Addr, w *connWindow, now time.Time) {
	if w.more == 0 {
		w.first = now
		p.wg.Add(1)
		w.timer = time.AfterFunc(time.Until(w.start.Add(p.window)), func() {
			defer p.wg.Done()
			p.summarise(addr, w)
		})
	}
	w.more++
	w.last = now
}

// pruneLocked forgets the windows that ended with nothing left to record.
func (p *peerConns) pruneLocked(now time.Time) {
	for addr, w := range p.windows {
		if w.more == 0 && now.Sub(w.start) >= p.window {
			delete(p.windows, addr)
		}
	}
}

// recordFirst audits a window's first refusal: the peer identified as a
// console or tailnet caller is, else named by its address.
func (p *peerConns) recordFirst(w *connWindow, peer string) {
	defer p.wg.Done()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, _ := p.cfg.Gate.Tailnet(ctx, peer) // an unidentified peer is recorded by its address
	c.Transport = p.cfg.Transport
	p.mu.Lock()
	w.caller = c
	p.mu.Unlock()
	_ = p.cfg.Gate.Refuse(ctx, c, p.cfg.Method, refusal.New(refusal.RateLimit, connRefusalMsg, p.max))
}

// summarise writes the summary of w's refusals not yet recorded.
func (p *peerConns) summarise(addr netip.Addr, w *connWindow) {
	p.mu.Lock()
	if p.windows[addr] == w {
		delete(p.windows, addr)
	}
	n, c := w.more, w.caller
	w.more = 0
	p.mu.Unlock()
	if n == 0 {
		return
	}
	sample := access.CallerRecord(c, p.cfg.Method, "call", "")
	sample.Code = string(refusal.RateLimit)
	rec := recorder.Summary(sample, n, map[string]int{sample.Code: n}, w.first, w.last, 1)
	if _, err := p.cfg.Audit.Append(context.Background(), rec, true); err != nil {
		p.cfg.Log.Error("audit write failed: connection refusals' summary", "peer", c.Peer, "count", n, "err", err)
		return
	}
	p.cfg.Log.Warn("connections refused", "principal", c.Principal, "peer", c.Peer, "method", p.cfg.Method, "count", n)
}

// close writes the summaries pending at once and waits for every record;
// refusals after it are counted, not recorded. A nil p is no cap.
func (p *peerConns) close() {
	if p == nil {
		return
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	pending := map[netip.Addr]*connWindow{}
	for addr, w := range p.windows {
		if w.timer != nil && w.timer.Stop() {
			pending[addr] = w
		}
	}
	p.mu.Unlock()
	for addr, w := range pending {
		p.summarise(addr, w)
		p.wg.Done()
	}
	p.wg.Wait()
}
