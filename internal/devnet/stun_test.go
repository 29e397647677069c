package devnet

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"tailscale.com/envknob"
)

// A node of an unprivileged user hears the dev net's STUN on loopback: its
// sockets are not bound to the default route's interface, as tailscale
// binds them where it cannot mark them (SO_MARK needs CAP_NET_ADMIN). Run
// as root, the test forces that binding (TS_FORCE_LINUX_BIND_TO_DEVICE),
// so it fails, as it did for every unprivileged node (3 s of netcheck
// before the first packet), unless netns is off for the dev net.
func TestJoinHearsLoopbackSTUN(t *testing.T) {
	envknob.Setenv("TS_FORCE_LINUX_BIND_TO_DEVICE", "true")
	t.Cleanup(func() { envknob.Setenv("TS_FORCE_LINUX_BIND_TO_DEVICE", "") })
	n, err := Start(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	node, err := Join(ctx, n.ControlURL, NodeOptions{Dir: t.TempDir(), Hostname: "stun", Ephemeral: true})
	if err != nil {
		t.Fatal(err)
	}
	defer node.Close()
	lc, err := node.LocalClient()
	if err != nil {
		t.Fatal(err)
	}
	st, err := lc.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// STUN answered with the address the request came from: 127.0.0.1,
	// an endpoint no interface of the node lists (loopback is left out).
	for {
		if nd := n.Control.Node(st.Self.PublicKey); nd != nil {
			for _, ep := range nd.Endpoints {
				if ep.Addr() == netip.MustParseAddr("127.0.0.1") {
					return
				}
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no loopback endpoint learnt by STUN: %v", n.Control.Node(st.Self.PublicKey).Endpoints)
		case <-time.After(20 * time.Millisecond):
		}
	}
}
