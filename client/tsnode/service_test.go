package tsnode_test

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	"tailscale.com/tsnet"

	"coily.dev/coily/client"
	"coily.dev/coily/client/tsnode"
	"coily.dev/coily/internal/devnet"
	"coily.dev/coily/internal/testserver"
	coilyv1 "coily.dev/coily/proto/coily/v1"
	"coily.dev/coily/tsservice"
)

// A server that also serves the Tailscale Service svc:coily is reached by
// the Service's name (svc:coily, or its DNS name), and identifies the
// caller as the peer it is (WhoIs on the peer's own address): the Service
// carries the caller's tailnet identity, not a loopback forwarder's.
func TestExecThroughTheService(t *testing.T) {
	net, err := devnet.Start(nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(net.Close)
	in := testserver.Start(t, testserver.Options{Policy: failoverPolicy, Tailnet: true, Net: net, Hostname: "coily-a"})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	laptop, err := devnet.Join(ctx, net.ControlURL, devnet.NodeOptions{Dir: t.TempDir(), Hostname: "laptop", Ephemeral: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { laptop.Close() })
	if err := net.DefineService(ctx, "svc:coily", netip.MustParseAddr("100.99.0.9"), []*tsnet.Server{in.Node}, []*tsnet.Server{laptop}); err != nil {
		t.Fatal(err)
	}
	ln, err := tsservice.Listen(ctx, in.Node, "svc:coily", client.DefaultPort)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	in.Serve(ln)

	for _, name := range []string{"svc:coily", "coily." + devnet.MagicDNSDomain} {
		c, err := tsnode.Connect(ctx, laptop, name, time.Minute, func() {})
		if err != nil {
			t.Fatalf("connect to %s: %v", name, err)
		}
		st, err := c.API.Status(ctx, &coilyv1.StatusRequest{})
		c.Close()
		if err != nil {
			t.Fatalf("status through %s: %v", name, err)
		}
		cl := st.GetCaller()
		if !strings.HasSuffix(cl.GetPrincipal(), "@fake-control.example.net") || cl.GetTransport() != "tailnet" || !strings.HasPrefix(cl.GetPeer(), "laptop") {
			t.Errorf("through %s the server saw %v, want the laptop's user over the tailnet", name, cl)
		}
	}
}
