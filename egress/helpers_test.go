package egress

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"coily.dev/coily/internal/poll"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeResolver answers from a table and counts lookups per name.
type fakeResolver struct {
	mu      sync.Mutex
	answers map[string][]netip.Addr
	calls   map[string]int
}

func newResolver(kv ...string) *fakeResolver {
	r := &fakeResolver{answers: map[string][]netip.Addr{}, calls: map[string]int{}}
	for i := 0; i+1 < len(kv); i += 2 {
		r.answers[kv[i]] = append(r.answers[kv[i]], netip.MustParseAddr(kv[i+1]))
	}
	return r
}

func (r *fakeResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls[host]++
	if a, ok := r.answers[host]; ok {
		return a, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

func (r *fakeResolver) count(host string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.calls[host]
}

// recordingDialer dials for real and records every address it was given.
type recordingDialer struct {
	mu    sync.Mutex
	addrs []string
	d     net.Dialer
}

func (d *recordingDialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	d.mu.Lock()
	d.addrs = append(d.addrs, addr)
	d.mu.Unlock()
	return d.d.DialContext(ctx, network, addr)
}

func (d *recordingDialer) dialed() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.addrs...)
}

// testProxy is a Proxy served on a unix socket (as in production) and on
// a loopback TCP listener (for curl).
type testProxy struct {
	*Proxy
	socket string
	tcp    string
	dialer *recordingDialer
}

var loopback = anyPort("127.0.0.0/8")

// anyPort are allow_cidrs entries opening every port.
func anyPort(prefixes ...string) []CIDR {
	var out []CIDR
	for _, p := range prefixes {
		out = append(out, CIDR{Prefix: netip.MustParsePrefix(p)})
	}
	return out
}

func startProxy(t *testing.T, cfg Config, allow []string, cidrs []CIDR) *testProxy {
	t.Helper()
	al, err := NewAllowlist(allow, cidrs)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Allowlist = al
	if cfg.Rule == "" {
		cfg.Rule = "gh"
	}
	d := &recordingDialer{}
	cfg.Dialer = d
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(t.TempDir(), "egress.sock")
	ul, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	tl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for _, l := range []net.Listener{ul, tl} {
		wg.Add(1)
		go func() { defer wg.Done(); p.Serve(l) }()
	}
	t.Cleanup(func() { p.Close(); wg.Wait() })
	return &testProxy{Proxy: p, socket: sock, tcp: tl.Addr().String(), dialer: d}
}

// client is a net/http client whose proxy is tp, reached over the unix
// socket like the sandbox's bridge does.
func (tp *testProxy) client(t testing.TB, base *http.Transport) *http.Client {
	tr := base
	if tr == nil {
		tr = &http.Transport{}
	}
	tr = tr.Clone()
	tr.Proxy = http.ProxyURL(mustURL(t, "http://egress.invalid"))
	tr.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", tp.socket)
	}
	tr.DisableKeepAlives = true
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

// h2Only is a transport offering HTTP/2 alone by ALPN, trusting roots:
// an inspected connection speaks HTTP/1.1 with a client that offers it
// (docs/egress.md "Which HTTP"), so its HTTP/2 is reached only this way.
func h2Only(roots *x509.CertPool) *http.Transport {
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}
	tr.Protocols = new(http.Protocols)
	tr.Protocols.SetHTTP2(true)
	return tr
}

// keepAlive is c (one of client's) keeping its connections alive between
// requests: HTTP/1.1 responses of unknown length then come chunked.
func keepAlive(t testing.TB, c *http.Client) *http.Client {
	tr := c.Transport.(*http.Transport).Clone()
	tr.DisableKeepAlives = false
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: c.Timeout}
}

// raw sends one request head over the unix socket and returns the
// response (with its body read) and the connection.
func (tp *testProxy) raw(t *testing.T, head string) (*http.Response, string, net.Conn) {
	t.Helper()
	c, err := net.Dial("unix", tp.socket)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, head); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: "CONNECT"})
	if err != nil {
		t.Fatalf("%q: %v", head, err)
	}
	if resp.StatusCode == http.StatusOK {
		return resp, "", &bufConn{Conn: c, r: br}
	}
	body, _ := io.ReadAll(resp.Body)
	return resp, string(body), c
}

type bufConn struct {
	net.Conn
	r *bufio.Reader
}

func (b *bufConn) Read(p []byte) (int, error) { return b.r.Read(p) }

func connect(hostport string) string {
	return fmt.Sprintf("CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", hostport, hostport)
}

// echoServer echoes every connection on loopback until the test ends.
func echoServer(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { l.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() { defer wg.Done(); defer c.Close(); io.Copy(c, c) }()
		}
	}()
	return l.Addr().(*net.TCPAddr).Port
}

// waitFor polls cond until it holds, failing the test after 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	poll.Until(t, 10*time.Second, what, cond)
}

func findRow(rows []Row, host string, d Decision) (Row, bool) {
	for _, r := range rows {
		if r.Host.String() == host && r.Decision == d {
			return r, true
		}
	}
	return Row{}, false
}
