package egress

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// countingListener counts the connections it accepted, those that have
// ended (a read failed or the server closed it), and every byte they
// read: what an upstream received.
type countingListener struct {
	net.Listener
	accepted, ended, bytes atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.accepted.Add(1)
	return &countingConn{Conn: c, l: l}, nil
}

type countingConn struct {
	net.Conn
	l    *countingListener
	once sync.Once
}

func (c *countingConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.l.bytes.Add(int64(n))
	if err != nil {
		c.once.Do(func() { c.l.ended.Add(1) })
	}
	return n, err
}

func (c *countingConn) Close() error {
	c.once.Do(func() { c.l.ended.Add(1) })
	return c.Conn.Close()
}

// settled waits until every connection l accepted has ended, and returns
// the bytes read so far.
func (l *countingListener) settled(t *testing.T) int64 {
	t.Helper()
	waitFor(t, "the upstream to see every connection end", func() bool {
		return l.ended.Load() == l.accepted.Load()
	})
	return l.bytes.Load()
}

// countingTLSServer is an httptest TLS server (certificate for
// example.com, *.example.com and 127.0.0.1) that counts what it reads.
func countingTLSServer(t *testing.T) (*httptest.Server, *countingListener) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, payload)
	}))
	cl := &countingListener{Listener: srv.Listener}
	srv.Listener = cl
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // refused handshakes are expected
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv, cl
}

// tlsGet does a TLS handshake with cfg through a CONNECT tunnel to
// target and, if it succeeds, one GET.
func tlsGet(t *testing.T, tp *testProxy, target string, cfg *tls.Config) (string, error) {
	resp, body, c := tp.raw(t, connect(target))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("CONNECT %s: %d %q", target, resp.StatusCode, body)
	}
	defer c.Close()
	tc := tls.Client(c, cfg)
	if err := tc.Handshake(); err != nil {
		return "", err
	}
	io.WriteString(tc, "GET / HTTP/1.1\r\nHost: example.com\r\nConnection: close\r\n\r\n")
	r, err := http.ReadResponse(bufio.NewReader(tc), nil)
	if err != nil {
		return "", err
	}
	defer r.Body.Close()
	b, err := io.ReadAll(r.Body)
	return string(b), err
}

func TestProxyTLSServerName(t *testing.T) {
	srv, cl := countingTLSServer(t)
	port := portOf(t, srv.URL)
	roots := x509.NewCertPool()
	roots.AddCert(srv.Certificate())
	cfg := func(name string) *tls.Config { return &tls.Config{ServerName: name, RootCAs: roots} }
	noSNI := &tls.Config{InsecureSkipVerify: true}
	res := newResolver("example.com", "127.0.0.1")
	for _, mode := range []Mode{Enforce, Observe} {
		t.Run(mode.String(), func(t *testing.T) {
			var allow []string
			if mode == Enforce {
				allow = []string{"example.com:" + port}
			}
			tp := startProxy(t, Config{Resolver: res, Mode: mode}, allow, loopback)
			cases := []struct {
				target string
				cfg    *tls.Config
				ok     bool
			}{
				{"example.com:" + port, cfg("evil.test"), false},
				{"example.com:" + port, cfg("www.example.com"), false}, // the certificate covers it; the proxy does not
				{"127.0.0.1:" + port, cfg("example.com"), false},
				{"example.com:" + port, cfg("example.com"), true},
				{"example.com:" + port, cfg("EXAMPLE.com."), true},
				{"example.com:" + port, noSNI, true},
				{"127.0.0.1:" + port, cfg("127.0.0.1"), true}, // crypto/tls sends no SNI for an address
			}
			for _, tc := range cases {
				before := cl.settled(t)
				body, err := tlsGet(t, tp, tc.target, tc.cfg)
				after := cl.settled(t)
				switch {
				case tc.ok && (err != nil || body != payload):
					t.Errorf("%s with SNI %q: %q, %v; want %q", tc.target, tc.cfg.ServerName, body, err, payload)
				case !tc.ok && (err == nil || !strings.Contains(err.Error(), "access denied")):
					t.Errorf("%s with SNI %q: %q, %v; want the access_denied alert", tc.target, tc.cfg.ServerName, body, err)
				case !tc.ok && after != before:
					t.Errorf("%s with SNI %q: the upstream received %d bytes", tc.target, tc.cfg.ServerName, after-before)
				case tc.ok && after == before:
					t.Errorf("%s with SNI %q: the upstream received nothing", tc.target, tc.cfg.ServerName)
				}
			}
			p := mustAtoi(port)
			waitFor(t, "the refused rows", func() bool {
				a, _ := rowFor(tp.Rows(), "example.com", p, Deny)
				b, _ := rowFor(tp.Rows(), "127.0.0.1", p, Deny)
				return a.Conns == 2 && b.Conns == 1 && a.Duration > 0 && b.Duration > 0
			})
			for _, host := range []string{"example.com", "127.0.0.1"} {
				r, _ := rowFor(tp.Rows(), host, p, Deny)
				if r.Reason != reasonSNIMismatch || r.BytesUp != 0 || r.Failures != 0 {
					t.Errorf("deny row of %s = %+v", host, r)
				}
			}
			passed := Allow
			if mode == Observe {
				passed = ObserveDeny
			}
			waitFor(t, "the rows of the tunnels let through", func() bool {
				r, _ := rowFor(tp.Rows(), "example.com", p, passed)
				return r.Conns == 3 && r.BytesUp > 0
			})
		})
	}
}

// A client offering Encrypted Client Hello, its public name the CONNECT
// host, is refused in both modes before the upstream gets a byte: the
// server would answer the encrypted inner name, which the proxy cannot
// check. Its row and the refusal sentence name ECH.
func TestProxyRefusesECH(t *testing.T) {
	srv, cl := countingTLSServer(t)
	port := portOf(t, srv.URL)
	res := newResolver("example.com", "127.0.0.1")
	for _, mode := range []Mode{Enforce, Observe} {
		t.Run(mode.String(), func(t *testing.T) {
			tp := startProxy(t, Config{Resolver: res, Mode: mode}, []string{"example.com:" + port}, loopback)
			cfg := &tls.Config{ServerName: "secret.example", MinVersion: tls.VersionTLS13,
				EncryptedClientHelloConfigList: echConfigList(t, "example.com")}
			before := cl.settled(t)
			body, err := tlsGet(t, tp, "example.com:"+port, cfg)
			if err == nil || !strings.Contains(err.Error(), "access denied") {
				t.Fatalf("ECH hello: %q, %v; want the access_denied alert", body, err)
			}
			if after := cl.settled(t); after != before {
				t.Fatalf("the upstream received %d bytes", after-before)
			}
			p := mustAtoi(port)
			waitFor(t, "the refused row", func() bool {
				r, _ := rowFor(tp.Rows(), "example.com", p, Deny)
				return r.Conns == 1
			})
			r, _ := rowFor(tp.Rows(), "example.com", p, Deny)
			if r.Reason != reasonECH || r.BytesUp != 0 {
				t.Fatalf("deny row = %+v; want reason %s and nothing sent up", r, reasonECH)
			}
			msg := sniffed{refuse: reasonECH}.message(Target{Host: "example.com", Port: p}, "r")
			if !strings.Contains(msg, "Encrypted Client Hello") || !strings.Contains(msg, "turn ECH off") {
				t.Fatalf("message %q does not say what to do", msg)
			}
		})
	}
}

// Raw first bytes: what passes is forwarded unchanged, a refused tunnel
// gets an alert and its upstream not one byte, and the upstream's own
// first words reach the client before the client has said anything.
func TestProxyTunnelFirstBytes(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cl := &countingListener{Listener: l}
	var wg sync.WaitGroup
	t.Cleanup(func() { l.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := cl.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() { defer wg.Done(); defer c.Close(); io.WriteString(c, "220 ready\r\n"); io.Copy(c, c) }()
		}
	}()
	port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	hosts := []string{"a.test", "b.test", "c.test", "d.test", "e.test", "f.test", "g.test"}
	var kv, allow []string
	for _, h := range hosts {
		kv, allow = append(kv, h, "127.0.0.1"), append(allow, h+":"+port)
	}
	tp := startProxy(t, Config{Resolver: newResolver(kv...), IdleTimeout: 500 * time.Millisecond}, allow, loopback)
	alert := []byte{recordTypeAlert, 3, 3, 0, 2, 2, 49}
	helloFor := func(name string) []byte { return records(hello(sniExt(hostEntry(0, name))), 1<<14) }
	oneByteRecords := func(name string) []byte { return records(hello(sniExt(hostEntry(0, name))), 1) }
	cases := []struct {
		host      string
		pipelined bool     // sent with the CONNECT head, in the same write
		writes    [][]byte // one write each, after the 200
		refused   string
		timeout   bool // the idle watchdog may close the tunnel before the alert is sent
	}{
		{host: "a.test", writes: [][]byte{[]byte("SSH-2.0-OpenSSH_9.6\r\n")}},
		{host: "b.test", writes: [][]byte{oneByteRecords("b.test")[:7], oneByteRecords("b.test")[7:100], oneByteRecords("b.test")[100:]}},
		{host: "c.test", writes: [][]byte{oneByteRecords("evil.test")[:50], oneByteRecords("evil.test")[50:]}, refused: reasonSNIMismatch},
		{host: "d.test", pipelined: true, writes: [][]byte{helloFor("evil.test")}, refused: reasonSNIMismatch},
		{host: "e.test", pipelined: true, writes: [][]byte{helloFor("E.TEST.")}},
		{host: "f.test", writes: [][]byte{records(handshake(2, helloBody()), 1<<14)}, refused: reasonBadHello},
		{host: "g.test", writes: [][]byte{helloFor("g.test")[:20]}, refused: reasonBadHello, timeout: true}, // then silence
	}
	for _, tc := range cases {
		before := cl.settled(t)
		c, err := net.Dial("unix", tp.socket)
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(10 * time.Second))
		head := connect(tc.host + ":" + port)
		writes := tc.writes
		if tc.pipelined {
			head, writes = head+string(writes[0]), writes[1:]
		}
		io.WriteString(c, head)
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, &http.Request{Method: "CONNECT"})
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("%s: %v %v", tc.host, resp, err)
		}
		if !tc.pipelined {
			// The upstream speaks first, before the client has sent a byte.
			if line, err := br.ReadString('\n'); line != "220 ready\r\n" {
				t.Fatalf("%s: banner %q, %v", tc.host, line, err)
			}
		}
		var sent []byte
		for _, w := range writes {
			c.Write(w)
			sent = append(sent, w...)
		}
		if tc.refused == "" {
			want := string(sent)
			if tc.pipelined {
				want = "220 ready\r\n" + string(tc.writes[0])
			}
			got := make([]byte, len(want))
			if _, err := io.ReadFull(br, got); err != nil || string(got) != want {
				t.Errorf("%s: echoed %q, %v; want the bytes sent unchanged", tc.host, got, err)
			}
			c.Close()
			continue
		}
		got, _ := io.ReadAll(br)
		c.Close()
		if tc.pipelined { // the banner may come before or after the alert
			got = []byte(strings.Replace(string(got), "220 ready\r\n", "", 1))
		}
		if string(got) != string(alert) && !(tc.timeout && len(got) == 0) {
			t.Errorf("%s: got %q, want the access_denied alert and the end", tc.host, got)
		}
		if after := cl.settled(t); after != before {
			t.Errorf("%s: the upstream received %d bytes of a refused tunnel", tc.host, after-before)
		}
		p := mustAtoi(port)
		waitFor(t, tc.host+"'s deny row", func() bool {
			r, ok := rowFor(tp.Rows(), tc.host, p, Deny)
			return ok && r.Reason == tc.refused && r.Conns == 1 && r.BytesUp == 0
		})
		if _, ok := rowFor(tp.Rows(), tc.host, p, Allow); ok {
			t.Errorf("%s: refused and also counted as allowed", tc.host)
		}
	}
}

func TestSNIMatches(t *testing.T) {
	host := Target{Host: "kube.example.com", Port: 443}
	ip, _ := ParseAuthority("127.0.0.1:443", 0)
	cases := []struct {
		t    Target
		name string
		want bool
	}{
		{host, "kube.example.com", true},
		{host, "KUBE.Example.COM", true},
		{host, "kube.example.com.", true},
		{host, "kube.example.com..", false},
		{host, ".kube.example.com", false},
		{host, "kube.example.com\x00", false},
		{host, "kube.example.com\x00.evil.test", false},
		{host, "\u212aube.example.com", false}, // KELVIN SIGN folds to k in Unicode, not in ASCII
		{host, "kube.example.coſ", false},
		{host, "a.kube.example.com", false},
		{host, "example.com", false},
		{host, "kube.example.co", false},
		{ip, "127.0.0.1", false},
		{ip, "localhost", false},
	}
	for _, tc := range cases {
		if got := sniMatches(tc.t, tc.name); got != tc.want {
			t.Errorf("sniMatches(%s, %q) = %v", tc.t, tc.name, got)
		}
	}
}
