package egress

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"coily.dev/coily/cmdtext"
	"coily.dev/coily/scrub"
)

// Resolver resolves a host name; *net.Resolver implements it.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Dialer dials an address; *net.Dialer implements it. The proxy only
// ever passes it an IP:port that passed classification.
type Dialer interface {
	DialContext(ctx context.Context, network, address string) (net.Conn, error)
}

// Config configures a Proxy. Zero limits take the defaults below.
type Config struct {
	Rule        string     // named in every message
	Allowlist   *Allowlist // nil allows no host
	Mode        Mode
	Resolver    Resolver      // default net.DefaultResolver
	Dialer      Dialer        // default a net.Dialer with a 10 s timeout
	MaxConns    int           // concurrent connections; default 64
	IdleTimeout time.Duration // no bytes either way, or no request head; default 60 s
	MaxDuration time.Duration // per connection; default 30 min
	MaxBytes    int64         // up+down over the proxy's life; 0: no cap
	Shared      *Budget       // a server-wide connection cap shared with other proxies; nil: none
	Now         func() time.Time
	Logger      *slog.Logger
	// Secrets are the exec's credentials: what the command asks for (a
	// host, a TLS server name) is shown, logged and audited only with
	// their forms redacted (cmdtext).
	Secrets *scrub.Set
	// Inspect, when set, names the hosts whose TLS the proxy terminates
	// (its CA's) and what it checks and injects in their requests.
	Inspect *Inspection
}

const (
	maxHeaderBytes = 64 << 10
	resolveTimeout = 10 * time.Second
)

// Proxy is an egress proxy for one rule (one exec). Serve it on any
// number of listeners; Close ends everything.
type Proxy struct {
	cfg      Config
	rows     rows
	requests requestRows
	bytes    atomic.Int64
	// sigv4Buf bounds the SigV4 bodies buffered at once (sigv4.go).
	sigv4Buf chan struct{}
	// sigv4Waiting counts the requests waiting for a slot of sigv4Buf.
	sigv4Waiting atomic.Int32

	mu        sync.Mutex
	closed    bool
	listeners map[net.Listener]struct{}
	conns     map[*conn]struct{}
	extra     int // upstream connections inspected CONNECTs opened beyond their first
	wg        sync.WaitGroup
}

// New checks cfg and fills in defaults.
func New(cfg Config) (*Proxy, error) {
	if cfg.Rule == "" {
		return nil, errors.New("egress: Config.Rule is empty")
	}
	if cfg.Resolver == nil {
		cfg.Resolver = net.DefaultResolver
	}
	if cfg.Dialer == nil {
		cfg.Dialer = &net.Dialer{Timeout: 10 * time.Second}
	}
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = 64
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = 60 * time.Second
	}
	if cfg.MaxDuration <= 0 {
		cfg.MaxDuration = 30 * time.Minute
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Proxy{cfg: cfg, listeners: map[net.Listener]struct{}{}, conns: map[*conn]struct{}{},
		sigv4Buf: make(chan struct{}, sigV4BufferSlots)}, nil
}

// ErrClosed is returned by Serve after Close.
var ErrClosed = errors.New("egress: proxy closed")

// Serve accepts connections on l until l fails or the proxy is closed
// (then it returns ErrClosed). Serve closes l.
func (p *Proxy) Serve(l net.Listener) error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		l.Close()
		return ErrClosed
	}
	p.listeners[l] = struct{}{}
	p.wg.Add(1)
	p.mu.Unlock()
	defer p.wg.Done()
	defer l.Close()
	for {
		nc, err := l.Accept()
		if err != nil {
			p.mu.Lock()
			closed := p.closed
			delete(p.listeners, l)
			p.mu.Unlock()
			if closed {
				return ErrClosed
			}
			return fmt.Errorf("egress: accept: %w", err)
		}
		p.admit(nc)
	}
}

// admit starts a goroutine for nc, or refuses it over the cap.
func (p *Proxy) admit(nc net.Conn) {
	c := &conn{client: nc}
	p.mu.Lock()
	msg := ""
	switch {
	case p.closed:
	case len(p.conns)+p.extra >= p.cfg.MaxConns:
		msg = fmt.Sprintf("coily: %d egress connections of rule %q are open, the most allowed; close one and retry", p.cfg.MaxConns, p.cfg.Rule)
	case !p.cfg.Shared.acquire():
		msg = fmt.Sprintf("coily: the server's %d egress connections are all in use; retry later (rule %q)", p.cfg.Shared.Cap(), p.cfg.Rule)
	}
	if p.closed {
		p.mu.Unlock()
		nc.Close()
		return
	}
	if msg != "" {
		p.wg.Add(1) // not closed: Close has not begun to wait
		p.mu.Unlock()
		go func() { // never stall the accept loop on a slow client
			defer p.wg.Done()
			// The request head is read first (bounded), so that the client,
			// which writes it before it reads, reads the refusal instead of
			// failing its write on a closed connection.
			nc.SetDeadline(time.Now().Add(time.Second))
			skipHead(nc)
			writeStatus(nc, http.StatusServiceUnavailable, msg)
			nc.Close()
		}()
		return
	}
	p.conns[c] = struct{}{}
	p.wg.Add(1)
	p.mu.Unlock()
	go func() {
		defer p.wg.Done()
		defer p.cfg.Shared.release()
		defer func() {
			c.close()
			p.mu.Lock()
			delete(p.conns, c)
			p.mu.Unlock()
		}()
		p.handle(c)
	}()
}

// Close stops every listener and connection and waits for them.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	for l := range p.listeners {
		l.Close()
	}
	for c := range p.conns {
		c.close()
	}
	p.mu.Unlock()
	p.wg.Wait()
	return nil
}

// Rows is a snapshot of the aggregated rows, sorted by host, port, decision.
func (p *Proxy) Rows() []Row { return p.rows.list(p.cfg.Secrets) }

// Requests are the rows of the requests made on inspected connections,
// in order, at most MaxRequestRows, and how many more were made.
func (p *Proxy) Requests() ([]RequestRow, int) { return p.requests.list(p.cfg.Secrets) }

// conn is one client connection and, once dialed, its upstream.
type conn struct {
	mu       sync.Mutex
	client   net.Conn
	upstream net.Conn
	closed   bool
}

func (c *conn) setUpstream(u net.Conn) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		u.Close()
		return false
	}
	c.upstream = u
	return true
}

func (c *conn) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	c.client.Close()
	if c.upstream != nil {
		c.upstream.Close()
	}
}

// handle reads one request, decides, and tunnels or forwards it.
func (p *Proxy) handle(c *conn) {
	lr := &headLimit{r: c.client, n: maxHeaderBytes}
	br := bufio.NewReader(lr)
	c.client.SetReadDeadline(time.Now().Add(p.cfg.IdleTimeout))
	req, err := http.ReadRequest(br)
	if err != nil {
		writeStatus(c.client, http.StatusBadRequest, "coily: egress proxy could not read the request: "+err.Error())
		return
	}
	lr.n = -1
	c.client.SetReadDeadline(time.Time{})
	kind := kindHTTP
	var t Target
	if req.Method == http.MethodConnect {
		kind = kindConnect
		t, err = ParseAuthority(req.RequestURI, 0)
	} else {
		t, req.URL, err = ParseAbsoluteHTTP(req.RequestURI)
	}
	if err != nil {
		writeStatus(c.client, http.StatusBadRequest, "coily: egress proxy takes `CONNECT host:port` or an absolute http:// URI: "+err.Error())
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), p.cfg.MaxDuration)
	defer cancel()
	stop := context.AfterFunc(ctx, c.close)
	defer stop()
	p.serveTarget(ctx, c, br, req, t, kind)
}

type requestKind int

const (
	kindConnect requestKind = iota
	kindHTTP
)

func (k requestKind) defaultPort() int {
	if k == kindConnect {
		return 443
	}
	return 80
}

// serveTarget decides on t, records the row and relays the bytes.
func (p *Proxy) serveTarget(ctx context.Context, c *conn, br *bufio.Reader, req *http.Request, t Target, kind requestKind) {
	start := p.cfg.Now()
	v := p.decide(ctx, t, kind)
	if v.status != 0 {
		key := p.open(t, v.decision, v.reason, v.message, start)
		writeStatus(c.client, v.status, v.message)
		p.rows.finish(key, 0, 0, 0, v.decision != Deny, p.cfg.Now())
		return
	}
	if !c.setUpstream(v.upstream) {
		key := p.open(t, v.decision, v.reason, "", start)
		p.rows.finish(key, 0, 0, 0, true, p.cfg.Now())
		return
	}
	if kind == kindConnect && p.inspects(t) {
		p.intercept(ctx, c, br, t, v, start)
		return
	}
	if kind == kindConnect {
		p.tunnel(c, br, t, v, start) // it records the row once it has seen the first bytes
		return
	}
	if msg := p.plainPlaceholder(req, t); msg != "" {
		key := p.open(t, Deny, reasonPlaceholder, msg, start)
		writeStatus(c.client, http.StatusForbidden, msg)
		p.rows.finish(key, 0, 0, 0, false, p.cfg.Now())
		return
	}
	key := p.open(t, v.decision, v.reason, "", start)
	if ins := p.injections(); len(ins) > 0 && req.Body != nil {
		req.Body = newScanReader(req.Body, ins, 0) // a placeholder in the body cuts it before it leaves
	}
	up, down := p.forward(c, br, req, &meter{p: p})
	end := p.cfg.Now()
	p.rows.finish(key, up, down, end.Sub(start), false, end)
}

// open counts a connection in the row of (t, d) and logs the decision
// when it starts a row.
func (p *Proxy) open(t Target, d Decision, reason, message string, start time.Time, attrs ...any) rowKey {
	key, fresh := p.rows.start(rowKey{host: t.Host, port: t.Port, decision: d}, reason, message, start)
	if fresh { // once per row: a flood of connections is not a flood of log lines
		args := []any{"rule", p.cfg.Rule, "target", cmdtext.New(p.cfg.Secrets, t.String()), "decision", d, "reason", reason}
		for i := 0; i+1 < len(attrs); i += 2 { // values the command sent (a TLS server name)
			args = append(args, attrs[i], cmdtext.New(p.cfg.Secrets, fmt.Sprint(attrs[i+1])))
		}
		p.cfg.Logger.Info("egress", args...)
	}
	return key
}

// verdict is decide's answer: a status and message to refuse with, or
// an established upstream connection.
type verdict struct {
	decision Decision
	reason   string
	status   int
	message  string
	upstream net.Conn
}

// decide checks the allowlist, resolves once, classifies, and dials an
// address that passed.
func (p *Proxy) decide(ctx context.Context, t Target, kind requestKind) verdict {
	rule := p.cfg.Rule
	al := p.cfg.Allowlist
	if t.Addr.IsValid() {
		// IP literals pass only inside an explicit AllowCIDRs prefix.
		if class := Classify(t.Addr); !al.AllowsAddr(t.Addr, t.Port) {
			if class == Public {
				return deny("ip-literal", fmt.Sprintf("coily: %s is an IP address and no allow_cidrs entry of rule %q covers it; name the host instead, or ask the owner to add a CIDR", t, rule))
			}
			return deny(class.String(), fmt.Sprintf("coily: %s is %s %s address; refused (rule %q)", t, class.article(), class, rule))
		}
		return p.dial(ctx, t, []netip.Addr{t.Addr}, Allow, "")
	}
	decision, reason := Allow, ""
	if !al.AllowsHost(t.Host, t.Port, kind.defaultPort()) {
		msg := fmt.Sprintf("coily: host %s is not in the egress allowlist of rule %q; ask the owner to add it", t, rule)
		if p.cfg.Mode == Enforce {
			return deny("not-allowlisted", msg)
		}
		decision, reason = ObserveDeny, "not-allowlisted"
	}
	rctx, cancel := context.WithTimeout(ctx, resolveTimeout)
	addrs, err := p.cfg.Resolver.LookupNetIP(rctx, "ip", t.Host)
	cancel()
	if err != nil || len(addrs) == 0 {
		return verdict{decision: decision, reason: reason, status: http.StatusBadGateway,
			message: fmt.Sprintf("coily: cannot resolve host %s: %v", t.Host, err)}
	}
	var ok []netip.Addr
	var firstBad netip.Addr
	var badClass Class
	for _, a := range addrs {
		if class, allowed := allowedAddr(al, a, t.Port); allowed {
			ok = append(ok, a.Unmap())
		} else if !firstBad.IsValid() {
			firstBad, badClass = a, class
		}
	}
	if len(ok) == 0 {
		return deny(badClass.String(), fmt.Sprintf("coily: host %s resolves to %s, %s %s address; refused (rule %q)", t, firstBad, badClass.article(), badClass, rule))
	}
	return p.dial(ctx, t, ok, decision, reason)
}

func deny(reason, msg string) verdict {
	return verdict{decision: Deny, reason: reason, status: http.StatusForbidden, message: msg}
}

// dial tries each checked address in turn; it never passes a name.
func (p *Proxy) dial(ctx context.Context, t Target, addrs []netip.Addr, d Decision, reason string) verdict {
	var err error
	for _, a := range addrs {
		var u net.Conn
		u, err = p.cfg.Dialer.DialContext(ctx, "tcp", netip.AddrPortFrom(a, uint16(t.Port)).String())
		if err == nil {
			return verdict{decision: d, reason: reason, upstream: u}
		}
	}
	return verdict{decision: d, reason: reason, status: http.StatusBadGateway,
		message: fmt.Sprintf("coily: cannot connect to %s: %v", t, err)}
}

// writeStatus answers with a plain-text status and closes nothing.
func writeStatus(w net.Conn, status int, msg string) {
	body := msg + "\n"
	fmt.Fprintf(w, "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\nConnection: close\r\nX-Coily-Egress: refused\r\n\r\n%s",
		status, http.StatusText(status), len(body), body)
}

// skipHead reads r up to the end of a request head (an empty line), at
// most maxHeaderBytes, until the reader's deadline.
func skipHead(r io.Reader) {
	var last [4]byte
	buf := make([]byte, 512)
	for read := 0; read < maxHeaderBytes; {
		n, err := r.Read(buf)
		for _, b := range buf[:n] {
			last = [4]byte{last[1], last[2], last[3], b}
			if last == [4]byte{'\r', '\n', '\r', '\n'} {
				return
			}
		}
		read += n
		if err != nil {
			return
		}
	}
}

// headLimit caps the bytes read while n >= 0; n < 0 lifts the cap.
type headLimit struct {
	r    interface{ Read([]byte) (int, error) }
	n    int64
	what string // "request" or "response"
}

func (h *headLimit) Read(b []byte) (int, error) {
	if h.n < 0 {
		return h.r.Read(b)
	}
	if h.n == 0 {
		return 0, fmt.Errorf("%s head longer than 64 KiB", cmp.Or(h.what, "request"))
	}
	if int64(len(b)) > h.n {
		b = b[:h.n]
	}
	n, err := h.r.Read(b)
	h.n -= int64(n)
	return n, err
}

// injections are the placeholders the proxy knows, nil without any.
func (p *Proxy) injections() []Injection {
	if p.cfg.Inspect == nil {
		return nil
	}
	return p.cfg.Inspect.Inject
}

// plainPlaceholder is the refusal of a plain-HTTP request carrying a
// placeholder in its URL or headers: plain HTTP is never a place the
// proxy injects a credential. "" when it carries none.
func (p *Proxy) plainPlaceholder(req *http.Request, t Target) string {
	ins := p.injections()
	found := containsPlaceholder(req.RequestURI, ins) || containsPlaceholder(unescape(req.RequestURI), ins)
	for name, vals := range req.Header {
		for _, v := range vals {
			found = found || containsPlaceholder(name, ins) || containsPlaceholder(v, ins) || basicHides(name, v, ins)
		}
	}
	if !found {
		return ""
	}
	return fmt.Sprintf("coily: %s (host %s, rule %q)", (&placeholderError{where: "over plain HTTP"}).Error(), t, p.cfg.Rule)
}
