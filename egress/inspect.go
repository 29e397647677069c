package egress

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Inspection is what the proxy does with the hosts whose TLS it
// terminates: the hosts of CA. A CONNECT to any other host stays a
// tunnel that carries bytes unchanged.
type Inspection struct {
	CA *Authority
	// Roots verify the upstream's certificate (nil: the system's), as a
	// client of the command's own would.
	Roots *x509.CertPool
	// Rules are the method and path rules of each inspected host; a host
	// without any lets every request through.
	Rules map[string][]HTTPRule
	// MaxBody caps each request body (0: no cap).
	MaxBody int64
	// Inject swaps placeholders for secrets.
	Inject []Injection
}

// inspects reports whether CONNECT t is terminated here.
func (p *Proxy) inspects(t Target) bool {
	in := p.cfg.Inspect
	return in != nil && in.CA != nil && !t.Addr.IsValid() && in.CA.Covers(t.Host)
}

// Reasons a request on an inspected connection is refused.
const (
	reasonHTTPRule     = "http-rule"
	reasonPlaceholder  = "placeholder"
	reasonBodyCap      = "body-cap"
	reasonHostMismatch = "host-mismatch"
	reasonBadRequest   = "bad-request"
	reasonPath         = "path"
	reasonConnClosed   = "connection-closed"
)

// inspected is one CONNECT whose TLS the proxy terminates.
type inspected struct {
	p        *Proxy
	t        Target
	ctx      context.Context
	tr       *http.Transport
	up, down atomic.Int64
	h2       handlerGate
	raw      *touchConn // the client's side, under the TLS
}

// handlerGate counts the HTTP/2 handlers of a connection. net/http starts
// each in its own goroutine and does not wait for them when the
// connection ends, so a handler can begin after Serve returned: counting
// it with a bare WaitGroup.Add there races the Wait and its row would be
// recorded after the connection's. Here a handler enters under the lock
// or not at all: once closed, a late one sends nothing upstream.
type handlerGate struct {
	mu     sync.Mutex
	closed bool
	wg     sync.WaitGroup
}

// enter admits a handler (leave when done); false once closed.
func (g *handlerGate) enter() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return false
	}
	g.wg.Add(1)
	return true
}

func (g *handlerGate) leave() { g.wg.Done() }

// close admits no more handlers and waits for those admitted.
func (g *handlerGate) close() {
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
	g.wg.Wait()
}

// intercept answers 200, terminates the client's TLS with a leaf of the
// exec's CA, and serves its requests (HTTP/1.1 or HTTP/2, as ALPN
// decides) by sending each, checked, to the upstream over a TLS
// connection verified like any client's. It records the row.
func (p *Proxy) intercept(ctx context.Context, c *conn, br *bufio.Reader, t Target, v verdict, start time.Time) {
	if _, err := io.WriteString(c.client, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		p.rows.finish(p.open(t, v.decision, v.reason, "", start), 0, 0, 0, true, p.cfg.Now())
		return
	}
	m := &meter{p: p}
	stop := m.watch(c)
	defer stop()
	var sniBad string
	leaf, _ := p.cfg.Inspect.CA.Leaf(t.Host)
	raw := &touchConn{Conn: c.client, r: br, m: m}
	tc := tls.Server(raw, &tls.Config{
		MinVersion: tls.VersionTLS12,
		// The server's order decides: HTTP/1.1 with every client that
		// offers it, HTTP/2 with a client that offers nothing else
		// (docs/egress.md "Which HTTP").
		NextProtos: []string{"http/1.1", "h2"},
		GetCertificate: func(h *tls.ClientHelloInfo) (*tls.Certificate, error) {
			if h.ServerName != "" && !sniMatches(t, h.ServerName) {
				sniBad = h.ServerName
				return nil, errors.New("server name is not the CONNECT host")
			}
			return leaf, nil
		},
	})
	hctx, cancel := context.WithTimeout(ctx, p.cfg.IdleTimeout)
	err := tc.HandshakeContext(hctx)
	cancel()
	if sniBad != "" {
		s := sniffed{refuse: reasonSNIMismatch, sni: sniBad}
		p.rows.finish(p.open(t, Deny, s.refuse, s.message(t, p.cfg.Rule), start, s.logAttrs()...), 0, 0, 0, false, p.cfg.Now())
		return
	}
	key := p.open(t, v.decision, v.reason, "", start)
	if err != nil {
		end := p.cfg.Now()
		p.rows.finish(key, 0, 0, end.Sub(start), true, end)
		return
	}
	rctx, rcancel := context.WithCancel(ctx)
	ic := &inspected{p: p, t: t, ctx: rctx, raw: raw}
	h2 := tc.ConnectionState().NegotiatedProtocol == "h2"
	ic.tr = ic.transport(c.upstream, m, h2)
	if h2 {
		ic.serveH2(tc)
	} else {
		ic.serveH1(tc)
	}
	rcancel()
	ic.h2.close()
	ic.tr.CloseIdleConnections()
	end := p.cfg.Now()
	p.rows.finish(key, ic.up.Load(), ic.down.Load(), end.Sub(start), false, end)
}

// transport is the client of one inspected connection's upstream: its
// first connection is the one decide dialed, later ones go to the same
// checked address (never a name); TLS is verified against Roots for the
// CONNECT host. It speaks HTTP/1.1, as the child does, unless the child
// speaks HTTP/2 (h2): then HTTP/2 where the upstream offers it.
func (ic *inspected) transport(first net.Conn, m *meter, h2 bool) *http.Transport {
	addr := first.RemoteAddr().String()
	var used atomic.Bool
	p := ic.p
	protos := new(http.Protocols)
	protos.SetHTTP1(true)
	protos.SetHTTP2(h2)
	return &http.Transport{
		Protocols: protos,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			u := first
			if used.Swap(true) {
				var err error
				if u, err = p.dialExtra(ctx, addr); err != nil {
					return nil, err
				}
			}
			return countConn{Conn: u, m: m, up: &ic.up, down: &ic.down}, nil
		},
		TLSClientConfig:       &tls.Config{ServerName: ic.t.Host, RootCAs: p.cfg.Inspect.Roots, MinVersion: tls.VersionTLS12, NextProtos: []string{"http/1.1"}},
		DisableCompression:    true,
		MaxConnsPerHost:       4,
		IdleConnTimeout:       p.cfg.IdleTimeout,
		TLSHandshakeTimeout:   p.cfg.IdleTimeout,
		ResponseHeaderTimeout: p.cfg.IdleTimeout,
	}
}

// serveH1 serves HTTP/1.1 requests one after the other until the client
// or a response closes the connection. Each head is checked raw first
// (checkHead) so that framing another hop could read differently is
// refused rather than normalized.
func (ic *inspected) serveH1(tc *tls.Conn) {
	br := bufio.NewReaderSize(tc, maxHeaderBytes+4096)
	for {
		tc.SetReadDeadline(time.Now().Add(ic.p.cfg.IdleTimeout))
		if err := checkHead(br); err != nil {
			if !errors.Is(err, io.EOF) {
				ic.refuseRaw(tc, err)
			}
			return
		}
		req, err := http.ReadRequest(br)
		if err != nil {
			ic.refuseRaw(tc, err)
			return
		}
		tc.SetReadDeadline(time.Time{})
		cont := func() {}
		if expectsContinue(req.Header) {
			cont = func() { io.WriteString(tc, "HTTP/1.1 100 Continue\r\n\r\n") }
		}
		resp, finish := ic.roundTrip(req, cont)
		keep := !req.Close && !resp.Close && req.ProtoAtLeast(1, 1)
		down, err := ic.writeH1(tc, req, resp, keep)
		finish(down)
		if !keep || err != nil { // a response cut short: the next would read as its rest
			return
		}
		// What the upstream left of the body would be read as the next head.
		if !bodyDone(req) {
			return
		}
	}
}

// bodyDone reports a request body read to its end.
func bodyDone(req *http.Request) bool {
	n, err := req.Body.Read(make([]byte, 1))
	return n == 0 && errors.Is(err, io.EOF)
}

// refuseRaw answers a request that could not be read as one.
func (ic *inspected) refuseRaw(w io.Writer, err error) {
	msg := fmt.Sprintf("coily: a request to %s could not be read: %v (rule %q)", ic.t, err, ic.p.cfg.Rule)
	ic.p.rows.finish(ic.p.open(ic.t, Deny, reasonBadRequest, msg, ic.p.cfg.Now()), 0, 0, 0, false, ic.p.cfg.Now())
	ic.p.requests.add(requestRow{RequestRow: RequestRow{Time: ic.p.cfg.Now(), Port: ic.t.Port, Decision: Deny,
		Reason: reasonBadRequest, Status: http.StatusBadRequest, Proto: "HTTP/1.1"}, host: ic.t.Host})
	body := msg + "\n"
	fmt.Fprintf(w, "HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\nConnection: close\r\nX-Coily-Egress: refused\r\n\r\n%s", len(body), body)
}

// writeH1 writes resp to the client and returns the body bytes written,
// and an error when the response could not be written whole.
func (ic *inspected) writeH1(w io.Writer, req *http.Request, resp *http.Response, keep bool) (int64, error) {
	defer resp.Body.Close()
	stripHopByHop(resp.Header)
	var n int64
	resp.Proto, resp.ProtoMajor, resp.ProtoMinor = "HTTP/1.1", 1, 1
	resp.Request = req
	resp.Close = !keep
	// The upstream's reason phrase and trailers never reach the child:
	// neither is scrubbed (a trailer's values arrive after the body, when
	// the headers are long written), as HTTP/2 passes on neither.
	resp.Status = ""
	resp.Trailer = nil
	resp.TransferEncoding = nil
	if resp.ContentLength < 0 && keep {
		resp.TransferEncoding = []string{"chunked"}
	}
	// A chunk's size line, data and CRLF go out as one write, sent before
	// the next read of the upstream's body can wait.
	// (Write only: bufio's ReadFrom would read into the buffer a flush
	// empties.)
	bw := bufio.NewWriterSize(w, 64<<10)
	flush := bw.Flush
	if ic.raw != nil { // the TLS records of one flush go out in one write
		ic.raw.batch()
		defer ic.raw.unbatch()
		flush = func() error {
			if err := bw.Flush(); err != nil {
				return err
			}
			return ic.raw.flush()
		}
	}
	ahead := newReadAhead(resp.Body, flush)
	defer ahead.Close()
	resp.Body = countBody{r: ahead, n: &n}
	err := resp.Write(struct{ io.Writer }{bw})
	if ferr := flush(); err == nil {
		err = ferr
	}
	return n, err
}

// serveH2 serves the connection with net/http's HTTP/2 server; it
// returns once the connection is over.
func (ic *inspected) serveH2(tc *tls.Conn) {
	l := &oneConn{c: tc, done: make(chan struct{})}
	srv := &http.Server{
		Handler:     http.HandlerFunc(ic.handleH2),
		IdleTimeout: ic.p.cfg.IdleTimeout,
		ConnState: func(_ net.Conn, s http.ConnState) {
			if s == http.StateClosed || s == http.StateHijacked {
				l.Close()
			}
		},
		ErrorLog: nil,
	}
	srv.Protocols = new(http.Protocols)
	srv.Protocols.SetHTTP2(true)
	srv.TLSConfig = &tls.Config{NextProtos: []string{"h2"}}
	srv.Serve(l)
	srv.Close()
}

func (ic *inspected) handleH2(w http.ResponseWriter, r *http.Request) {
	if !ic.h2.enter() { // the connection is over and its row written
		ic.p.requests.add(requestRow{RequestRow: RequestRow{Time: ic.p.cfg.Now(), Port: ic.t.Port, Decision: Deny,
			Reason: reasonConnClosed, Status: http.StatusServiceUnavailable, Proto: r.Proto}, host: ic.t.Host, method: r.Method, path: r.URL.Path})
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	defer ic.h2.leave()
	resp, finish := ic.roundTrip(r, func() {})
	defer resp.Body.Close()
	stripHopByHop(resp.Header)
	for k, vs := range resp.Header {
		w.Header()[k] = vs
	}
	if resp.ContentLength >= 0 {
		w.Header().Set("Content-Length", strconv.FormatInt(resp.ContentLength, 10))
	}
	w.WriteHeader(resp.StatusCode)
	var n int64
	rc := http.NewResponseController(w)
	buf := make([]byte, 32<<10)
	for {
		k, err := resp.Body.Read(buf)
		if k > 0 {
			if _, werr := w.Write(buf[:k]); werr != nil {
				break
			}
			n += int64(k)
			rc.Flush()
		}
		if err != nil {
			break
		}
	}
	finish(n)
}

// oneConn is a listener that yields one connection, then waits until
// closed.
type oneConn struct {
	mu   sync.Mutex
	c    net.Conn
	done chan struct{}
	once sync.Once
}

func (l *oneConn) Accept() (net.Conn, error) {
	l.mu.Lock()
	c := l.c
	l.c = nil
	l.mu.Unlock()
	if c != nil {
		return c, nil
	}
	<-l.done
	return nil, net.ErrClosed
}

func (l *oneConn) Close() error   { l.once.Do(func() { close(l.done) }); return nil }
func (l *oneConn) Addr() net.Addr { return dummyAddr{} }

type dummyAddr struct{}

func (dummyAddr) Network() string { return "egress" }
func (dummyAddr) String() string  { return "inspected" }

// touchConn is the client's side of an inspected connection: reads go
// through r (what the CONNECT's reader buffered first) and every byte
// either way resets the idle watchdog. Between batch and unbatch (one
// HTTP/1.1 response, written by one goroutine) writes gather in a buffer
// sent at each flush: a chunk of 16 KiB and its framing make two TLS
// records, which then leave in one write, not two.
type touchConn struct {
	net.Conn
	r io.Reader
	m *meter
	// mu guards wb: the response writer flushes it while the TLS
	// connection may write through it for the reading side (a KeyUpdate
	// answered while a request body is read).
	mu sync.Mutex
	wb *bufio.Writer // non-nil between batch and unbatch
}

func (c *touchConn) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	c.m.touch()
	return n, err
}

func (c *touchConn) Write(b []byte) (int, error) {
	c.mu.Lock()
	w := io.Writer(c.Conn)
	if c.wb != nil {
		w = c.wb
	}
	n, err := w.Write(b)
	c.mu.Unlock()
	c.m.touch()
	return n, err
}

func (c *touchConn) batch() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.wb = bufio.NewWriterSize(c.Conn, 64<<10)
}

func (c *touchConn) flush() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.wb == nil {
		return nil
	}
	return c.wb.Flush()
}

// unbatch sends what is gathered and writes straight through again.
func (c *touchConn) unbatch() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.wb != nil {
		c.wb.Flush()
	}
	c.wb = nil
}

// countConn counts an upstream connection's bytes through the meter (the
// proxy's byte cap) and into up and down.
type countConn struct {
	net.Conn
	m        *meter
	up, down *atomic.Int64
}

func (c countConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.down.Add(int64(n))
	if !c.m.count(n) {
		c.Conn.Close()
		return n, errByteCap
	}
	return n, err
}

func (c countConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	c.up.Add(int64(n))
	if !c.m.count(n) && err == nil {
		c.Conn.Close()
		err = errByteCap
	}
	return n, err
}

// countBody counts what is read through it.
type countBody struct {
	r io.ReadCloser
	n *int64
}

func (b countBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	*b.n += int64(n)
	return n, err
}

func (b countBody) Close() error { return b.r.Close() }

// WriteTo counts what r writes to w, without a copy when r is a
// WriterTo.
func (b countBody) WriteTo(w io.Writer) (int64, error) {
	n, err := io.Copy(w, b.r)
	*b.n += n
	return n, err
}
