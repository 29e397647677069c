package tsnode

import (
	"net/netip"
	"testing"

	"tailscale.com/ipn/ipnstate"
	"tailscale.com/tailcfg"
	"tailscale.com/types/key"
	"tailscale.com/types/views"
)

// A name resolves only as the control server assigned it: a peer that
// calls itself the server ("coily", "svc:coily", the Service's DNS name)
// is never dialled in its place (before, a peer's self-reported host name
// matched first, and could take every call made to the name).
func TestResolveTrustsOnlyControlsNames(t *testing.T) {
	server, laptop, evil := netip.MustParseAddr("100.64.0.1"), netip.MustParseAddr("100.64.0.2"), netip.MustParseAddr("100.64.0.66")
	vip := netip.MustParseAddr("100.99.0.9")
	routes := views.SliceOf([]netip.Prefix{netip.PrefixFrom(vip, 32)})
	peer := func(host, dns string, ip netip.Addr, primary *views.Slice[netip.Prefix]) *ipnstate.PeerStatus {
		return &ipnstate.PeerStatus{HostName: host, DNSName: dns, TailscaleIPs: []netip.Addr{ip}, PrimaryRoutes: primary}
	}
	st := &ipnstate.Status{
		CurrentTailnet: &ipnstate.TailnetStatus{MagicDNSSuffix: "tail.ts.net"},
		Peer: map[key.NodePublic]*ipnstate.PeerStatus{
			key.NewNode().Public(): peer("svc:coily", "evil-1.tail.ts.net.", evil, nil),
			key.NewNode().Public(): peer("coily.tail.ts.net", "evil-2.tail.ts.net.", evil, nil),
			key.NewNode().Public(): peer("coily-a", "coily-a.tail.ts.net.", server, &routes),
			key.NewNode().Public(): peer("coily-b", "laptop.tail.ts.net.", laptop, nil),
		},
	}
	records := func() (*tailcfg.DNSConfig, error) {
		return &tailcfg.DNSConfig{ExtraRecords: []tailcfg.DNSRecord{
			{Name: "coily.tail.ts.net", Value: vip.String()},
			{Name: "lan.tail.ts.net", Value: "192.168.1.10"},
		}}, nil
	}
	for _, tc := range []struct {
		host       string
		dial, ping netip.Addr
	}{
		{"svc:coily", vip, server},
		{"coily.tail.ts.net", vip, server},
		{"coily-a", server, server},
		{"coily-a.tail.ts.net", server, server},
		{"coily-b", netip.Addr{}, netip.Addr{}},         // its host name, not its DNS name
		{"lan.tail.ts.net", netip.Addr{}, netip.Addr{}}, // not a tailnet address
		{"svc:laptop", netip.Addr{}, netip.Addr{}},
	} {
		dial, ping, err := resolve(st, records, tc.host)
		if tc.dial.IsValid() != (err == nil) || dial != tc.dial || ping != tc.ping {
			t.Errorf("%s: dial %v ping %v (%v), want dial %v ping %v", tc.host, dial, ping, err, tc.dial, tc.ping)
		}
	}
}
