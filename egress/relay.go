package egress

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// errByteCap ends a connection once the proxy's MaxBytes is spent.
var errByteCap = errors.New("egress: byte cap reached")

// meter counts bytes, enforces the byte cap, and notes the last
// activity for the idle watchdog.
type meter struct {
	p    *Proxy
	last atomic.Int64 // unix nanoseconds of the last byte either way
}

func (m *meter) touch() { m.last.Store(time.Now().UnixNano()) }

// count adds n bytes to the proxy's total; false once over the cap.
func (m *meter) count(n int) bool {
	m.touch()
	total := m.p.bytes.Add(int64(n))
	return m.p.cfg.MaxBytes <= 0 || total <= m.p.cfg.MaxBytes
}

// watch closes c after IdleTimeout without a byte either way; the
// returned func stops it.
func (m *meter) watch(c *conn) func() {
	idle := m.p.cfg.IdleTimeout
	m.touch()
	var mu sync.Mutex
	var t *time.Timer
	stopped := false
	check := func() {
		mu.Lock()
		defer mu.Unlock()
		if stopped {
			return
		}
		since := time.Since(time.Unix(0, m.last.Load()))
		if since >= idle {
			c.close()
			return
		}
		t.Reset(idle - since) // not re-armed once stopped
	}
	mu.Lock()
	t = time.AfterFunc(idle, check)
	mu.Unlock()
	return func() {
		mu.Lock()
		stopped = true
		t.Stop()
		mu.Unlock()
	}
}

// countReader counts what it reads into *n through the meter.
type countReader struct {
	r io.Reader
	m *meter
	n *int64
}

func (c countReader) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	*c.n += int64(n)
	if !c.m.count(n) {
		return n, errByteCap
	}
	return n, err
}

// countWriter counts what it writes into *n through the meter.
type countWriter struct {
	w io.Writer
	m *meter
	n *int64
}

func (c countWriter) Write(b []byte) (int, error) {
	n, err := c.w.Write(b)
	*c.n += int64(n)
	if !c.m.count(n) && err == nil {
		err = errByteCap
	}
	return n, err
}

// tunnel answers 200 and relays the upstream's bytes to the client at
// once (some protocols speak first), and the client's to the upstream
// once sniff has passed its first bytes; all unchanged, until the
// upstream ends, the client and upstream both end, or a bound trips. A
// tunnel sniff refuses is closed before one byte went upstream. tunnel
// records the row.
func (p *Proxy) tunnel(c *conn, br *bufio.Reader, t Target, v verdict, start time.Time) {
	if _, err := io.WriteString(c.client, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		key := p.open(t, v.decision, v.reason, "", start)
		end := p.cfg.Now()
		p.rows.finish(key, 0, 0, end.Sub(start), false, end)
		return
	}
	m := &meter{p: p}
	stop := m.watch(c)
	defer stop()
	var up, down int64
	downDone := make(chan struct{})
	go func() {
		defer close(downDone)
		io.Copy(c.client, countReader{r: c.upstream, m: m, n: &down})
		c.close()
	}()
	var key rowKey
	if s := p.sniff(c, br, t, m); s.refuse != "" {
		key = p.open(t, Deny, s.refuse, s.message(t, p.cfg.Rule), start, s.logAttrs()...)
		refuseTLS(c.client)
		c.close()
	} else {
		key = p.open(t, v.decision, v.reason, "", start)
		p.relayUp(c, br, m, s, &up)
	}
	<-downDone
	end := p.cfg.Now()
	p.rows.finish(key, up, down, end.Sub(start), false, end)
}

// relayUp sends the sniffed bytes and then the rest of the client's
// upstream; at the client's end of stream it half-closes the upstream.
func (p *Proxy) relayUp(c *conn, br *bufio.Reader, m *meter, s sniffed, up *int64) {
	err := s.readErr
	if len(s.data) > 0 {
		if _, werr := (countWriter{w: c.upstream, m: m, n: up}).Write(s.data); werr != nil {
			err = werr
		}
	}
	if err == nil {
		_, err = io.Copy(c.upstream, countReader{r: br, m: m, n: up})
	}
	if cw, ok := c.upstream.(interface{ CloseWrite() error }); ok && (err == nil || err == io.EOF) {
		cw.CloseWrite()
		return
	}
	c.close()
}

// hopByHop are the headers that belong to one connection (RFC 9110 §7.6.1).
var hopByHop = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

func stripHopByHop(h http.Header) {
	for _, v := range h.Values("Connection") {
		for _, f := range strings.Split(v, ",") {
			if f = strings.TrimSpace(f); f != "" {
				h.Del(f)
			}
		}
	}
	for _, k := range hopByHop {
		h.Del(k)
	}
}

// forward sends one plain-HTTP request upstream in origin form, with the
// Host the allowlist checked, and relays the response; both without
// hop-by-hop headers.
func (p *Proxy) forward(c *conn, br *bufio.Reader, req *http.Request, m *meter) (up, down int64) {
	stop := m.watch(c)
	defer stop()
	stripHopByHop(req.Header)
	req.RequestURI = ""
	req.Host = req.URL.Host
	req.Close = true
	// The body keeps reading from br (the head cap is lifted).
	if err := req.Write(countWriter{w: c.upstream, m: m, n: &up}); err != nil {
		writeStatus(c.client, http.StatusBadGateway, fmt.Sprintf("coily: sending the request to %s failed: %v", req.URL.Host, err))
		return up, down
	}
	// The upstream is the command's choice as much as the request: its
	// response head is bounded like the request's, then the cap lifts.
	rl := &headLimit{r: countReader{r: c.upstream, m: m, n: &down}, n: maxHeaderBytes, what: "response"}
	resp, err := http.ReadResponse(bufio.NewReader(rl), req)
	rl.n = -1
	if err != nil {
		writeStatus(c.client, http.StatusBadGateway, fmt.Sprintf("coily: reading the response of %s failed: %v", req.URL.Host, err))
		return up, down
	}
	defer resp.Body.Close()
	stripHopByHop(resp.Header)
	resp.Close = true
	resp.Write(c.client)
	return up, down
}
