package tsservice_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"strconv"
	"testing"
	"time"

	"tailscale.com/tsnet"

	"coily.dev/coily/internal/devnet"
	"coily.dev/coily/tsservice"
)

const (
	svcName = "svc:coily"
	port    = 5555
)

var vip = netip.MustParseAddr("100.99.0.7")

type bed struct {
	net          *devnet.Net
	host, client *tsnet.Server
}

func start(t *testing.T, hostTags ...string) *bed {
	t.Helper()
	n, err := devnet.Start(nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	join := func(name string, tags ...string) *tsnet.Server {
		s, err := devnet.Join(ctx, n.ControlURL, devnet.NodeOptions{Dir: t.TempDir(), Hostname: name, Tags: tags, Ephemeral: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	b := &bed{net: n, host: join("coily-a", hostTags...), client: join("laptop", "tag:agent")}
	return b
}

func (b *bed) define(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := b.net.DefineService(ctx, svcName, vip, []*tsnet.Server{b.host}, []*tsnet.Server{b.client}); err != nil {
		t.Fatal(err)
	}
}

// A connection to the Service reaches its host's listener with the
// peer's own tailnet address as its remote address (the host's WhoIs
// names the peer), and the host opens no socket on its own network for
// it: nothing on loopback a local process could reach, unlike tsnet's
// ListenService, which forwards to a listener on localhost.
func TestServiceConnectionIsThePeers(t *testing.T) {
	b := start(t, "tag:coily")
	b.define(t)
	before := listeningSockets(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ln, err := tsservice.Listen(ctx, b.host, svcName, port)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if after := listeningSockets(t); len(after) > len(before) {
		t.Errorf("Listen opened a listening socket on the host: before %v, after %v", before, after)
	}

	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			t.Error(err)
			close(accepted)
			return
		}
		accepted <- c
	}()
	c, err := b.client.Dial(ctx, "tcp", ln.FQDN()+":"+strconv.Itoa(port))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	sc, ok := <-accepted
	if !ok {
		t.Fatal("nothing accepted")
	}
	defer sc.Close()
	buf := make([]byte, 5)
	if _, err := io.ReadFull(sc, buf); err != nil || string(buf) != "hello" {
		t.Fatalf("read %q, %v", buf, err)
	}

	ip4, _ := b.client.TailscaleIPs()
	remote, err := netip.ParseAddrPort(sc.RemoteAddr().String())
	if err != nil || remote.Addr().Unmap() != ip4 {
		t.Fatalf("remote address %v, want the client's tailnet address %v", sc.RemoteAddr(), ip4)
	}
	lc, err := b.host.LocalClient()
	if err != nil {
		t.Fatal(err)
	}
	who, err := lc.WhoIs(ctx, sc.RemoteAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	if who.Node.ComputedName != "laptop" && who.Node.Hostinfo.Hostname() != "laptop" {
		t.Errorf("WhoIs names %q, want laptop", who.Node.ComputedName)
	}
}

// Only the Service's address on its port reaches the listener: the host's
// own address on that port does not.
func TestServiceListensOnlyOnItsAddress(t *testing.T) {
	b := start(t, "tag:coily")
	b.define(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ln, err := tsservice.Listen(ctx, b.host, svcName, port)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			t.Errorf("accepted a connection from %v to the host's own address", c.RemoteAddr())
			c.Close()
		}
	}()
	hostIP, _ := b.host.TailscaleIPs()
	dctx, dcancel := context.WithTimeout(ctx, 10*time.Second)
	defer dcancel()
	c, err := b.client.Dial(dctx, "tcp", net.JoinHostPort(hostIP.String(), strconv.Itoa(port)))
	if err == nil {
		// A connection the node resets: reading ends at once.
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, rerr := c.Read(make([]byte, 1))
		c.Close()
		if rerr == nil {
			t.Fatal("the host's own address on the Service's port answered")
		}
	}
}

// Close withdraws the port's handler and the advertisement it added.
func TestCloseWithdraws(t *testing.T) {
	b := start(t, "tag:coily")
	b.define(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ln, err := tsservice.Listen(ctx, b.host, svcName, port)
	if err != nil {
		t.Fatal(err)
	}
	lc, err := b.host.LocalClient()
	if err != nil {
		t.Fatal(err)
	}
	prefs, err := lc.GetPrefs(ctx)
	if err != nil || len(prefs.AdvertiseServices) != 1 || prefs.AdvertiseServices[0] != svcName {
		t.Fatalf("advertised %v (%v), want [%s]", prefs.AdvertiseServices, err, svcName)
	}
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := ln.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Accept after Close: %v", err)
	}
	sc, err := lc.GetServeConfig(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if sc != nil && sc.Services[svcName] != nil {
		t.Errorf("serve config still holds %s: %+v", svcName, sc.Services[svcName])
	}
	prefs, err = lc.GetPrefs(ctx)
	if err != nil || len(prefs.AdvertiseServices) != 0 {
		t.Errorf("still advertised %v (%v)", prefs.AdvertiseServices, err)
	}
}

// An untagged node cannot host a Service, and a tagged one the tailnet has
// not given the Service is told so; neither is left advertising.
func TestListenRefuses(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	untagged := start(t)
	if _, err := tsservice.Listen(ctx, untagged.host, svcName, port); !errors.Is(err, tsservice.ErrUntagged) {
		t.Errorf("untagged host: %v, want ErrUntagged", err)
	}
	ungiven := start(t, "tag:coily")
	if _, err := tsservice.Listen(ctx, ungiven.host, svcName, port); !errors.Is(err, tsservice.ErrNoVIP) {
		t.Errorf("Service not given: %v, want ErrNoVIP", err)
	}
	for _, s := range []*tsnet.Server{untagged.host, ungiven.host} {
		lc, err := s.LocalClient()
		if err != nil {
			t.Fatal(err)
		}
		if p, err := lc.GetPrefs(ctx); err != nil || len(p.AdvertiseServices) != 0 {
			t.Errorf("%s advertises %v (%v)", s.Hostname, p.AdvertiseServices, err)
		}
	}
	if _, err := tsservice.Listen(ctx, ungiven.host, svcName, 0); err == nil {
		t.Error("port 0 accepted")
	}
}

func TestParseName(t *testing.T) {
	for _, tc := range []struct {
		in string
		ok bool
	}{
		{"svc:coily", true},
		{"svc:coily-team", true},
		{"coily", false},
		{"svc:", false},
		{"svc:Coily", false},
		{"svc:coily.example", false},
		{"svc:-coily", false},
		{"svc:coily/../x", false},
		{"svc:coily\x00", false},
		{"", false},
	} {
		_, err := tsservice.ParseName(tc.in)
		if (err == nil) != tc.ok {
			t.Errorf("ParseName(%q): %v, want ok=%v", tc.in, err, tc.ok)
		}
	}
}

func FuzzParseName(f *testing.F) {
	for _, s := range []string{"svc:coily", "coily", "svc:", "svc:Coily", "svc:coily/../x", "svc:coily\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := tsservice.ParseName(s)
		if err != nil {
			return
		}
		// An accepted name is one DNS label after svc:, usable as a host name.
		label := string(n)[len("svc:"):]
		if label == "" || len(label) > 63 {
			t.Fatalf("accepted %q", s)
		}
		for _, r := range label {
			if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-') {
				t.Fatalf("accepted %q with %q", s, r)
			}
		}
	})
}

// A server that died without closing its listener serves the Service
// again once started on the same node state, and withdraws it on Close:
// tsnet starts a node with fresh prefs and serve config, so nothing the
// dead run advertised or served is left in the way.
func TestServesAgainAfterACrash(t *testing.T) {
	n, err := devnet.Start(nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	dir := t.TempDir()
	join := func() *tsnet.Server {
		s, err := devnet.Join(ctx, n.ControlURL, devnet.NodeOptions{Dir: dir, Hostname: "coily-a", Tags: []string{"tag:coily"}})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	first := join()
	if err := n.DefineService(ctx, svcName, vip, []*tsnet.Server{first}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := tsservice.Listen(ctx, first, svcName, port); err != nil {
		t.Fatal(err)
	}
	first.Close() // the server dies: its listener never closed

	again := join()
	defer again.Close()
	ln, err := tsservice.Listen(ctx, again, svcName, port)
	if err != nil {
		t.Fatalf("listen after a crash: %v", err)
	}
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	lc, err := again.LocalClient()
	if err != nil {
		t.Fatal(err)
	}
	if p, err := lc.GetPrefs(ctx); err != nil || len(p.AdvertiseServices) != 0 {
		t.Errorf("after Close the node still advertises %v (%v)", p.AdvertiseServices, err)
	}
}
