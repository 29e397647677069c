package egress

import (
	"net/netip"
	"testing"
)

func TestClassify(t *testing.T) {
	cases := map[string]Class{
		"8.8.8.8": Public, "1.1.1.1": Public, "2606:4700:4700::1111": Public, "100.63.255.255": Public,
		"100.128.0.0": Public, "172.32.0.1": Public, "::ffff:8.8.8.8": Public,
		"127.0.0.1": Loopback, "127.1.2.3": Loopback, "::1": Loopback, "::ffff:127.0.0.1": Loopback,
		"10.0.0.5": Private, "172.16.0.1": Private, "172.31.255.255": Private, "192.168.1.1": Private,
		"fc00::1": Private, "fd12:3456::1": Private, "::ffff:10.1.2.3": Private,
		"169.254.1.1": LinkLocal, "fe80::1": LinkLocal, "fe80::1%eth0": LinkLocal, "febf::1": LinkLocal,
		"100.64.0.1": Tailnet, "100.127.255.255": Tailnet, "100.101.102.103": Tailnet, "fd7a:115c:a1e0::1": Tailnet,
		"169.254.169.254": Metadata, "169.254.170.2": Metadata, "fd00:ec2::254": Metadata,
		"100.100.100.200": Metadata, "::ffff:169.254.169.254": Metadata,
		"224.0.0.1": Multicast, "239.255.255.250": Multicast, "ff02::1": Multicast,
		"0.0.0.0": Unspecified, "::": Unspecified, "::ffff:0.0.0.0": Unspecified,
		"255.255.255.255": Broadcast,
		"240.0.0.1":       Reserved, "0.1.2.3": Reserved, "192.0.2.1": Reserved, "198.51.100.1": Reserved,
		"203.0.113.1": Reserved, "198.18.0.1": Reserved, "192.0.0.8": Reserved, "2001:db8::1": Reserved,
		"100::1": Reserved, "fec0::1": Reserved, "4000::1": Reserved, "3fff::1": Reserved,
		// IPv4 embedded in IPv6: the class of the IPv4 when it is not
		// public, EmbeddedIPv4 when it is.
		"64:ff9b::127.0.0.1": Loopback, "64:ff9b::10.0.0.1": Private, "64:ff9b::169.254.169.254": Metadata,
		"64:ff9b::8.8.8.8": EmbeddedIPv4, "64:ff9b:1::a00:1": Private,
		"2002:7f00:1::": Loopback, "2002:a9fe:a9fe::1": Metadata, "2002:0808:0808::1": EmbeddedIPv4,
		"::127.0.0.1": Loopback, "::10.0.0.1": Private, "::8.8.8.8": EmbeddedIPv4,
		// Teredo stores its client inverted: ^f5ff:fffe is 10.0.0.1.
		"2001:0:4136:e378:8000:63bf:f5ff:fffe": Private,
	}
	for s, want := range cases {
		if got := Classify(netip.MustParseAddr(s)); got != want {
			t.Errorf("Classify(%s) = %v, want %v", s, got, want)
		}
	}
	if got := Classify(netip.Addr{}); got != Invalid {
		t.Errorf("Classify(zero) = %v, want invalid", got)
	}
}

func TestAllowedAddr(t *testing.T) {
	a := &Allowlist{AllowCIDRs: anyPort("127.0.0.0/8")}
	for s, want := range map[string]bool{"8.8.8.8": true, "127.0.0.1": true, "10.0.0.1": false,
		"169.254.169.254": false, "64:ff9b::8.8.8.8": false} {
		if _, got := allowedAddr(a, netip.MustParseAddr(s), 443); got != want {
			t.Errorf("allowedAddr(%s) = %v, want %v", s, got, want)
		}
	}
	if _, ok := allowedAddr(nil, netip.MustParseAddr("127.0.0.1"), 443); ok {
		t.Error("loopback allowed without AllowCIDRs")
	}
}
