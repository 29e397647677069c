package egress

import (
	"context"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"

	"golang.org/x/net/dns/dnsmessage"
)

// dnsServer is a real DNS server on loopback UDP answering A and AAAA
// queries from a table, and counting the queries per name; a name may
// answer differently each time (a rebinding attacker's server).
type dnsServer struct {
	mu      sync.Mutex
	answers map[string][][]netip.Addr // name -> answer per query, the last repeating
	queries map[string]int
	conn    net.PacketConn
}

func startDNS(t *testing.T, answers map[string][][]netip.Addr) *dnsServer {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &dnsServer{answers: answers, queries: map[string]int{}, conn: pc}
	done := make(chan struct{})
	go func() { defer close(done); s.serve() }()
	t.Cleanup(func() { pc.Close(); <-done })
	return s
}

func (s *dnsServer) serve() {
	buf := make([]byte, 1500)
	for {
		n, from, err := s.conn.ReadFrom(buf)
		if err != nil {
			return
		}
		if out, err := s.answer(buf[:n]); err == nil {
			_, _ = s.conn.WriteTo(out, from)
		}
	}
}

func (s *dnsServer) answer(query []byte) ([]byte, error) {
	var p dnsmessage.Parser
	h, err := p.Start(query)
	if err != nil {
		return nil, err
	}
	q, err := p.Question()
	if err != nil {
		return nil, err
	}
	name := strings.TrimSuffix(strings.ToLower(q.Name.String()), ".")
	s.mu.Lock()
	seq := s.answers[name]
	var addrs []netip.Addr
	if len(seq) > 0 {
		i := s.queries[name+"/"+q.Type.String()]
		addrs = seq[min(i, len(seq)-1)]
	}
	s.queries[name+"/"+q.Type.String()]++
	s.mu.Unlock()
	rcode := dnsmessage.RCodeSuccess
	if seq == nil {
		rcode = dnsmessage.RCodeNameError
	}
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true, RCode: rcode})
	b.EnableCompression()
	if err := b.StartQuestions(); err != nil {
		return nil, err
	}
	if err := b.Question(q); err != nil {
		return nil, err
	}
	if err := b.StartAnswers(); err != nil {
		return nil, err
	}
	rh := dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: 0}
	for _, a := range addrs {
		switch {
		case q.Type == dnsmessage.TypeA && a.Is4():
			err = b.AResource(rh, dnsmessage.AResource{A: a.As4()})
		case q.Type == dnsmessage.TypeAAAA && a.Is6():
			err = b.AAAAResource(rh, dnsmessage.AAAAResource{AAAA: a.As16()})
		}
		if err != nil {
			return nil, err
		}
	}
	return b.Finish()
}

// lookups is how many A queries name got.
func (s *dnsServer) lookups(name string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.queries[name+"/"+dnsmessage.TypeA.String()]
}

// resolver is Go's own DNS client, talking to s only.
func (s *dnsServer) resolver() *net.Resolver {
	addr := s.conn.LocalAddr().String()
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "udp", addr)
	}}
}

// With real DNS answers: names that point inside are refused whatever the
// allowlist says, a rebinding server gets one query per connection and
// its second answer is never dialed, and only checked addresses are.
func TestProxyRealDNS(t *testing.T) {
	echo := strconv.Itoa(echoServer(t))
	a := func(ss ...string) []netip.Addr {
		var out []netip.Addr
		for _, s := range ss {
			out = append(out, netip.MustParseAddr(s))
		}
		return out
	}
	dns := startDNS(t, map[string][][]netip.Addr{
		"inside.test":   {a("10.0.0.7")},
		"meta.test":     {a("169.254.169.254")},
		"tailnet.test":  {a("100.101.102.103", "fd7a:115c:a1e0::9")},
		"mapped.test":   {a("::ffff:127.0.0.1")},
		"loop.test":     {a("127.0.0.1")},
		"rebind.test":   {a("127.0.0.1"), a("10.0.0.1")},
		"mixed.test":    {a("10.9.9.9", "127.0.0.1")},
		"unlisted.test": {a("127.0.0.1")},
	})
	var allow []string
	for _, n := range []string{"inside", "meta", "tailnet", "mapped", "loop", "rebind", "mixed"} {
		allow = append(allow, n+".test:"+echo)
	}
	tp := startProxy(t, Config{Resolver: dns.resolver()}, allow, loopback)
	for _, tc := range []struct {
		host   string
		status int
		body   string
	}{
		{"inside.test", 403, "resolves to 10.0.0.7, a private address"},
		{"meta.test", 403, "a cloud metadata address"},
		{"tailnet.test", 403, "a CGNAT/tailnet address"},
		{"mapped.test", 200, ""}, // ::ffff:127.0.0.1 is loopback, which the CIDR allows, dialed as IPv4
		{"loop.test", 200, ""},
		{"rebind.test", 200, ""},
		{"mixed.test", 200, ""}, // only 127.0.0.1 passes
		{"unlisted.test", 403, "not in the egress allowlist"},
		{"nxdomain.test", 403, "not in the egress allowlist"},
	} {
		resp, body, c := tp.raw(t, connect(tc.host+":"+echo))
		if resp.StatusCode != tc.status || !strings.Contains(body, tc.body) {
			t.Errorf("%s: %d %q, want %d %q", tc.host, resp.StatusCode, body, tc.status, tc.body)
		}
		if tc.status == 200 {
			echoRoundTrip(t, c, "ping")
		}
		c.Close()
	}
	if n := dns.lookups("rebind.test"); n != 1 {
		t.Errorf("rebind.test was asked %d times for one connection, want 1", n)
	}
	if n := dns.lookups("unlisted.test"); n != 0 {
		t.Errorf("a name outside the allowlist was resolved %d times; enforce mode never asks", n)
	}
	for _, d := range tp.dialer.dialed() {
		if d != "127.0.0.1:"+echo {
			t.Errorf("dialed %q; only 127.0.0.1:%s passed the checks", d, echo)
		}
	}
	// The rebinding server's second answer is private: a second
	// connection resolves afresh and is refused, never dialed.
	resp, body, c := tp.raw(t, connect("rebind.test:"+echo))
	c.Close()
	if resp.StatusCode != 403 || !strings.Contains(body, "10.0.0.1, a private address") {
		t.Errorf("rebind.test second time: %d %q", resp.StatusCode, body)
	}
}
