package egress

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"
)

func mustURL(t testing.TB, s string) *url.URL {
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func portOf(t *testing.T, rawURL string) string {
	return mustURL(t, rawURL).Port()
}

const payload = "hello through coily"

func helloServers(t *testing.T) (plain, tlsSrv *httptest.Server) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Proxy-Authorization") != "" || r.Header.Get("X-Drop-Me") != "" {
			http.Error(w, "hop-by-hop header leaked", http.StatusTeapot)
			return
		}
		io.WriteString(w, payload+" "+r.Host)
	})
	plain, tlsSrv = httptest.NewServer(h), httptest.NewTLSServer(h)
	t.Cleanup(plain.Close)
	t.Cleanup(tlsSrv.Close)
	return plain, tlsSrv
}

// example.com is a name the httptest certificate covers; the fake
// resolver points it at loopback.
func TestProxyHTTPAndHTTPSWithNetHTTP(t *testing.T) {
	plain, tlsSrv := helloServers(t)
	hp, sp := portOf(t, plain.URL), portOf(t, tlsSrv.URL)
	res := newResolver("example.com", "127.0.0.1")
	tp := startProxy(t, Config{Resolver: res}, []string{"example.com:" + hp, "example.com:" + sp}, loopback)

	c := tp.client(t, nil)
	req, _ := http.NewRequest("GET", "http://example.com:"+hp+"/x", nil)
	req.Header.Set("Connection", "X-Drop-Me")
	req.Header.Set("X-Drop-Me", "1")
	checkGet(t, c, req, payload+" example.com:"+hp)

	cs := tp.client(t, tlsSrv.Client().Transport.(*http.Transport))
	req, _ = http.NewRequest("GET", "https://example.com:"+sp+"/y", nil)
	checkGet(t, cs, req, payload+" example.com:"+sp)

	if n := res.count("example.com"); n != 2 {
		t.Errorf("example.com resolved %d times for 2 requests, want 2", n)
	}
	for _, a := range tp.dialer.dialed() {
		if !strings.HasPrefix(a, "127.0.0.1:") {
			t.Errorf("dialer was given %q, not the checked address", a)
		}
	}
	for _, port := range []string{hp, sp} {
		p, _ := strconv.Atoi(port)
		// The row is complete once the proxy has finished the connection.
		waitFor(t, "the row of example.com:"+port, func() bool {
			r, ok := rowFor(tp.Rows(), "example.com", p, Allow)
			return ok && r.Duration > 0
		})
		r, _ := rowFor(tp.Rows(), "example.com", p, Allow)
		if r.Conns != 1 || r.BytesDown < int64(len(payload)) || r.BytesUp == 0 || r.First.IsZero() || r.Last.Before(r.First) {
			t.Errorf("row for example.com:%s = %+v", port, r)
		}
	}
}

// Go's net/http through the proxy, refused: plain HTTP gets the 403 with
// the X-Coily-Egress header and a body naming the rule and host; HTTPS
// gets its CONNECT refused (net/http reports the status), and nothing
// reaches either server.
func TestProxyRefusalsWithNetHTTP(t *testing.T) {
	plain, tlsSrv := helloServers(t)
	hp, sp := portOf(t, plain.URL), portOf(t, tlsSrv.URL)
	res := newResolver("example.com", "127.0.0.1", "other.example", "127.0.0.1")
	tp := startProxy(t, Config{Resolver: res}, []string{"example.com:" + hp, "example.com:" + sp}, loopback)

	resp, err := tp.client(t, nil).Get("http://other.example:" + hp + "/x")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden || resp.Header.Get("X-Coily-Egress") != "refused" ||
		!strings.Contains(string(body), `host other.example:`+hp+` is not in the egress allowlist of rule "gh"; ask the owner to add it`) {
		t.Fatalf("plain HTTP refusal: %d %v %q", resp.StatusCode, resp.Header, body)
	}
	_, err = tp.client(t, tlsSrv.Client().Transport.(*http.Transport)).Get("https://other.example:" + sp + "/y")
	if err == nil || !strings.Contains(err.Error(), "Forbidden") {
		t.Fatalf("HTTPS to a host outside the allowlist: %v; want the CONNECT refused (Forbidden)", err)
	}
	if n := res.count("other.example"); n != 0 {
		t.Errorf("other.example resolved %d times; a refused name is never looked up", n)
	}
	for _, port := range []string{hp, sp} {
		p, _ := strconv.Atoi(port)
		waitFor(t, "the deny row of other.example:"+port, func() bool {
			r, ok := rowFor(tp.Rows(), "other.example", p, Deny)
			return ok && r.Conns == 1 && r.Reason == "not-allowlisted"
		})
	}
}

func checkGet(t *testing.T, c *http.Client, req *http.Request, want string) {
	t.Helper()
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s: %v", req.URL, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || string(body) != want {
		t.Fatalf("%s: %d %q, want 200 %q", req.URL, resp.StatusCode, body, want)
	}
}

func rowFor(rows []Row, host string, port int, d Decision) (Row, bool) {
	for _, r := range rows {
		if r.Host.String() == host && r.Port == port && r.Decision == d {
			return r, true
		}
	}
	return Row{}, false
}

func TestProxyRefusesLoopbackWithoutCIDR(t *testing.T) {
	plain, _ := helloServers(t)
	hp := portOf(t, plain.URL)
	tp := startProxy(t, Config{Resolver: newResolver("example.com", "127.0.0.1")}, []string{"example.com:" + hp}, nil)
	resp, err := tp.client(t, nil).Get("http://example.com:" + hp + "/")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	want := "coily: host example.com:" + hp + " resolves to 127.0.0.1, a loopback address; refused (rule \"gh\")"
	if resp.StatusCode != 403 || !strings.Contains(string(body), want) {
		t.Fatalf("got %d %q, want 403 %q", resp.StatusCode, body, want)
	}
	if d := tp.dialer.dialed(); len(d) != 0 {
		t.Fatalf("dialed %v for a refused request", d)
	}
}

// An allow_cidrs entry with a port opens that port only: the host the
// rule names on its port passes, any other port of its address is
// refused, by name or as an IP literal.
func TestProxyCIDRPort(t *testing.T) {
	echo := echoServer(t)
	other := echoServer(t)
	res := newResolver("git.test", "127.0.0.1", "other.test", "127.0.0.1")
	one, err := ParseCIDR("127.0.0.1/32:" + strconv.Itoa(echo))
	if err != nil {
		t.Fatal(err)
	}
	tp := startProxy(t, Config{Resolver: res}, []string{"git.test:" + strconv.Itoa(echo), "other.test:" + strconv.Itoa(other)}, []CIDR{one})
	for _, tc := range []struct {
		head   string
		status int
		body   string
	}{
		{connect("git.test:" + strconv.Itoa(echo)), 200, ""},
		{connect("127.0.0.1:" + strconv.Itoa(echo)), 200, ""},
		{connect("127.0.0.1:" + strconv.Itoa(other)), 403, "a loopback address; refused"},
		{connect("127.0.0.1:22"), 403, "a loopback address; refused"},
		{connect("[::ffff:127.0.0.1]:22"), 403, "a loopback address; refused"},
		{connect("other.test:" + strconv.Itoa(other)), 403, "resolves to 127.0.0.1, a loopback address; refused"},
	} {
		resp, body, c := tp.raw(t, tc.head)
		if resp.StatusCode != tc.status || !strings.Contains(body, tc.body) {
			t.Errorf("%.60q: %d %q, want %d %q", tc.head, resp.StatusCode, body, tc.status, tc.body)
		}
		c.Close()
	}
	for _, a := range tp.dialer.dialed() {
		if a != "127.0.0.1:"+strconv.Itoa(echo) {
			t.Errorf("dialer was given %q; only 127.0.0.1:%d passed", a, echo)
		}
	}
}

func TestProxyDenials(t *testing.T) {
	echo := strconv.Itoa(echoServer(t))
	res := newResolver("a.sub.test", "127.0.0.1", "sub.test", "127.0.0.1", "ok.test", "127.0.0.1",
		"private.test", "10.0.0.1", "meta.test", "169.254.169.254", "mixed.test", "10.0.0.1", "mixed.test", "127.0.0.1")
	tp := startProxy(t, Config{Resolver: res},
		[]string{"*.sub.test:" + echo, "ok.test:" + echo, "private.test:" + echo, "meta.test:" + echo, "mixed.test:" + echo}, loopback)
	cases := []struct {
		head   string
		status int
		body   string
	}{
		{connect("a.sub.test:" + echo), 200, ""},
		{connect("ok.test:" + echo), 200, ""},
		{connect("mixed.test:" + echo), 200, ""}, // only the checked 127.0.0.1 is dialed
		{connect("other.test:443"), 403, `coily: host other.test:443 is not in the egress allowlist of rule "gh"; ask the owner to add it`},
		{connect("sub.test:" + echo), 403, "host sub.test:" + echo + " is not in the egress allowlist"},
		{connect("ok.test:1"), 403, "host ok.test:1 is not in the egress allowlist"},
		{connect("ok.test:443"), 403, "host ok.test:443 is not in the egress allowlist"},
		{"GET http://ok.test:1/ HTTP/1.1\r\nHost: ok.test\r\n\r\n", 403, "not in the egress allowlist"},
		{connect("private.test:" + echo), 403, "resolves to 10.0.0.1, a private address; refused"},
		{connect("meta.test:" + echo), 403, "resolves to 169.254.169.254, a cloud metadata address; refused"},
		{connect("10.0.0.5:443"), 403, `coily: 10.0.0.5:443 is a private address; refused (rule "gh")`},
		{connect("169.254.169.254:80"), 403, "a cloud metadata address"},
		{connect("169.254.1.1:80"), 403, "a link-local address"},
		{connect("100.64.0.1:443"), 403, "a CGNAT/tailnet address"},
		{connect("[fd7a:115c:a1e0::1]:443"), 403, "a CGNAT/tailnet address"},
		{connect("[::1]:443"), 403, "a loopback address"},
		{connect("[fe80::1]:443"), 403, "a link-local address"},
		{connect("[fc00::1]:443"), 403, "a private address"},
		{connect("[::ffff:10.0.0.1]:443"), 403, "a private address"},
		{connect("[64:ff9b::a00:1]:443"), 403, "a private address"},
		{connect("[64:ff9b::808:808]:443"), 403, "an IPv4-in-IPv6 address"},
		{connect("[2002:a9fe:a9fe::]:443"), 403, "a cloud metadata address"},
		{connect("224.0.0.1:443"), 403, "a multicast address"},
		{connect("0.0.0.0:443"), 403, "an unspecified address"},
		{connect("255.255.255.255:443"), 403, "a broadcast address"},
		{connect("240.0.0.1:443"), 403, "a reserved address"},
		{connect("192.0.2.1:443"), 403, "a reserved address"},
		{connect("8.8.8.8:443"), 403, "is an IP address and no allow_cidrs entry"},
		{connect("nowhere.test:443"), 403, "not in the egress allowlist"},
		{connect("user@ok.test:443"), 400, "egress proxy takes"},
		{connect("ok.test"), 400, "missing port"},
		{connect("ok.test:0"), 400, "port"},
		{"GET /relative HTTP/1.1\r\nHost: ok.test\r\n\r\n", 400, "absolute http:// URI"},
		{"GET https://ok.test/ HTTP/1.1\r\nHost: ok.test\r\n\r\n", 400, "use CONNECT"},
		{"NONSENSE\r\n\r\n", 400, "could not read the request"},
		{"GET http://ok.test/ HTTP/1.1\r\nX: " + strings.Repeat("a", 70<<10) + "\r\n\r\n", 400, "could not read"},
	}
	for _, tc := range cases {
		resp, body, c := tp.raw(t, tc.head)
		if resp.StatusCode != tc.status || !strings.Contains(body, tc.body) {
			t.Errorf("%.60q: %d %q, want %d %q", tc.head, resp.StatusCode, body, tc.status, tc.body)
		}
		if tc.status == 200 {
			echoRoundTrip(t, c, "ping")
		}
		c.Close()
	}
	for _, a := range tp.dialer.dialed() {
		if a != "127.0.0.1:"+echo {
			t.Errorf("dialer was given %q; only 127.0.0.1:%s passed", a, echo)
		}
	}
	if n := res.count("mixed.test"); n != 1 {
		t.Errorf("mixed.test resolved %d times, want 1", n)
	}
	if r, ok := findRow(tp.Rows(), "10.0.0.5", Deny); !ok || r.Reason != "private" || r.Conns != 1 {
		t.Errorf("deny row for 10.0.0.5 = %+v, %v", r, ok)
	}
}

func echoRoundTrip(t *testing.T, c net.Conn, msg string) {
	t.Helper()
	if _, err := io.WriteString(c, msg); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, len(msg))
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != msg {
		t.Fatalf("echo: %q, %v", buf, err)
	}
}

func TestProxyObserveLetsThroughAndRecords(t *testing.T) {
	plain, _ := helloServers(t)
	hp := portOf(t, plain.URL)
	res := newResolver("example.com", "127.0.0.1", "private.test", "10.0.0.1")
	tp := startProxy(t, Config{Resolver: res, Mode: Observe}, nil, loopback)
	c := tp.client(t, nil)
	for range 2 {
		req, _ := http.NewRequest("GET", "http://example.com:"+hp+"/", nil)
		checkGet(t, c, req, payload+" example.com:"+hp)
	}
	p, _ := strconv.Atoi(hp)
	waitFor(t, "both connections in the row", func() bool {
		r, _ := rowFor(tp.Rows(), "example.com", p, ObserveDeny)
		return r.BytesDown >= 2*int64(len(payload))
	})
	r, ok := rowFor(tp.Rows(), "example.com", p, ObserveDeny)
	if !ok || r.Conns != 2 || r.Reason != "not-allowlisted" || r.BytesDown < 2*int64(len(payload)) {
		t.Fatalf("observe row = %+v, %v; rows %+v", r, ok, tp.Rows())
	}
	// Observe relaxes the allowlist, never the address classes.
	resp, body, _ := tp.raw(t, connect("private.test:443"))
	if resp.StatusCode != 403 || !strings.Contains(body, "a private address") {
		t.Fatalf("observe mode: private.test got %d %q", resp.StatusCode, body)
	}
}

func TestProxyConnectionCap(t *testing.T) {
	echo := strconv.Itoa(echoServer(t))
	tp := startProxy(t, Config{Resolver: newResolver("ok.test", "127.0.0.1"), MaxConns: 1}, []string{"ok.test:" + echo}, loopback)
	_, _, first := tp.raw(t, connect("ok.test:"+echo))
	echoRoundTrip(t, first, "one")
	resp, body, _ := tp.raw(t, connect("ok.test:"+echo))
	if resp.StatusCode != 503 || !strings.Contains(body, `1 egress connections of rule "gh" are open`) {
		t.Fatalf("second connection: %d %q", resp.StatusCode, body)
	}
	first.Close()
	waitFor(t, "a connection slot", func() bool {
		tp.mu.Lock()
		defer tp.mu.Unlock()
		return len(tp.conns) == 0
	})
	resp, _, c := tp.raw(t, connect("ok.test:"+echo))
	if resp.StatusCode != 200 {
		t.Fatalf("after the first closed: %d", resp.StatusCode)
	}
	echoRoundTrip(t, c, "two")
}

// Proxies sharing a Budget cannot together hold more connections than it
// allows; a slot freed by one serves another.
func TestProxySharedBudget(t *testing.T) {
	echo := strconv.Itoa(echoServer(t))
	budget := NewBudget(2)
	cfg := Config{Resolver: newResolver("ok.test", "127.0.0.1"), Shared: budget}
	a := startProxy(t, cfg, []string{"ok.test:" + echo}, loopback)
	b := startProxy(t, cfg, []string{"ok.test:" + echo}, loopback)
	_, _, c1 := a.raw(t, connect("ok.test:"+echo))
	echoRoundTrip(t, c1, "one")
	_, _, c2 := b.raw(t, connect("ok.test:"+echo))
	echoRoundTrip(t, c2, "two")
	resp, body, _ := b.raw(t, connect("ok.test:"+echo))
	if resp.StatusCode != 503 || !strings.Contains(body, "the server's 2 egress connections are all in use") {
		t.Fatalf("third connection across two proxies: %d %q", resp.StatusCode, body)
	}
	c1.Close()
	waitFor(t, "a budget slot", func() bool { return len(budget.sem) == 1 })
	resp, _, c3 := b.raw(t, connect("ok.test:"+echo))
	if resp.StatusCode != 200 {
		t.Fatalf("after one closed: %d", resp.StatusCode)
	}
	echoRoundTrip(t, c3, "three")
}

func TestProxyIdleTimeout(t *testing.T) {
	echo := strconv.Itoa(echoServer(t))
	tp := startProxy(t, Config{Resolver: newResolver("ok.test", "127.0.0.1"), IdleTimeout: 300 * time.Millisecond},
		[]string{"ok.test:" + echo}, loopback)
	_, _, c := tp.raw(t, connect("ok.test:"+echo))
	echoRoundTrip(t, c, "active")
	start := time.Now()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatalf("idle tunnel read %d bytes, want the proxy to close it", n)
	}
	if d := time.Since(start); d < 250*time.Millisecond {
		t.Fatalf("closed after %v, before the idle timeout", d)
	}
	// A client that never sends its request head is cut too.
	silent, err := net.Dial("unix", tp.socket)
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	silent.SetReadDeadline(time.Now().Add(10 * time.Second))
	b, _ := io.ReadAll(silent)
	if !strings.Contains(string(b), "400 Bad Request") {
		t.Fatalf("silent client got %q", b)
	}
}

// A tunnel that stays busy is still cut at MaxDuration: a command cannot
// hold a connection (and its slot of the budget) for ever by trickling.
func TestProxyMaxDuration(t *testing.T) {
	echo := strconv.Itoa(echoServer(t))
	tp := startProxy(t, Config{Resolver: newResolver("ok.test", "127.0.0.1"), IdleTimeout: 5 * time.Second,
		MaxDuration: 500 * time.Millisecond}, []string{"ok.test:" + echo}, loopback)
	_, _, c := tp.raw(t, connect("ok.test:"+echo))
	start := time.Now()
	deadline := start.Add(10 * time.Second)
	for time.Now().Before(deadline) {
		c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Write([]byte("x")); err != nil {
			break
		}
		if _, err := c.Read(make([]byte, 1)); err != nil {
			break
		}
		time.Sleep(50 * time.Millisecond) // trickle: never idle long enough for the idle timeout
	}
	d := time.Since(start)
	if d < 450*time.Millisecond || d > 5*time.Second {
		t.Fatalf("a busy tunnel ended after %v; want it cut at MaxDuration (500ms)", d)
	}
}

func TestProxyByteCap(t *testing.T) {
	echo := strconv.Itoa(echoServer(t))
	tp := startProxy(t, Config{Resolver: newResolver("ok.test", "127.0.0.1"), MaxBytes: 64 << 10},
		[]string{"ok.test:" + echo}, loopback)
	_, _, c := tp.raw(t, connect("ok.test:"+echo))
	go func() {
		chunk := make([]byte, 16<<10)
		for range 64 {
			if _, err := c.Write(chunk); err != nil {
				return
			}
		}
	}()
	n, _ := io.Copy(io.Discard, c)
	if n >= 1<<20 || n > 64<<10+32<<10 {
		t.Fatalf("read %d bytes back through a 64 KiB cap", n)
	}
}

func TestProxyCloseEndsTunnels(t *testing.T) {
	echo := strconv.Itoa(echoServer(t))
	tp := startProxy(t, Config{Resolver: newResolver("ok.test", "127.0.0.1")}, []string{"ok.test:" + echo}, loopback)
	_, _, c := tp.raw(t, connect("ok.test:"+echo))
	echoRoundTrip(t, c, "x")
	tp.Close()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatal("tunnel still open after Close")
	}
	if _, err := net.Dial("unix", tp.socket); err == nil {
		t.Fatal("socket still accepts after Close")
	}
	if err := tp.Serve(&net.TCPListener{}); err != ErrClosed {
		t.Fatalf("Serve after Close: %v", err)
	}
	r, ok := rowFor(tp.Rows(), "ok.test", mustAtoi(echo), Allow) // Close waited for the tunnel
	if !ok || r.BytesUp != 1 || r.BytesDown != 1 {
		t.Fatalf("row after Close = %+v, %v", r, ok)
	}
}

func mustAtoi(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		panic(fmt.Sprint(s, err))
	}
	return n
}

// An upstream the command controls cannot make the proxy buffer an
// endless response head: past 64 KiB the request fails with 502.
func TestProxyResponseHeadBounded(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { l.Close(); <-done })
	go func() {
		defer close(done)
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		io.WriteString(c, "HTTP/1.1 200 OK\r\nX-Long: ")
		chunk := strings.Repeat("a", 64<<10)
		for range 64 { // 4 MiB of one header line, if anyone reads it
			if _, err := io.WriteString(c, chunk); err != nil {
				return
			}
		}
	}()
	port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	tp := startProxy(t, Config{Resolver: newResolver("up.test", "127.0.0.1")}, []string{"up.test:" + port}, loopback)
	resp, body, c := tp.raw(t, "GET http://up.test:"+port+"/ HTTP/1.1\r\nHost: up.test\r\n\r\n")
	c.Close()
	if resp.StatusCode != 502 || !strings.Contains(body, "response head longer than 64 KiB") {
		t.Fatalf("%d %q", resp.StatusCode, body)
	}
}
