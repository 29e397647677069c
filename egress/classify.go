package egress

import (
	"net/netip"

	"tailscale.com/net/tsaddr"
)

// Class is what kind of destination an address is. Only Public may be
// dialed unless an AllowCIDRs prefix contains the address.
type Class int

const (
	Public Class = iota
	Loopback
	Private
	LinkLocal
	Tailnet // CGNAT 100.64.0.0/10 and Tailscale's fd7a:115c:a1e0::/48
	Metadata
	Multicast
	Unspecified
	Broadcast
	Reserved
	EmbeddedIPv4 // a public IPv4 carried inside IPv6 (NAT64, 6to4, Teredo, compatible)
	Invalid
)

var classNames = [...]string{
	Public: "public", Loopback: "loopback", Private: "private", LinkLocal: "link-local",
	Tailnet: "CGNAT/tailnet", Metadata: "cloud metadata", Multicast: "multicast",
	Unspecified: "unspecified", Broadcast: "broadcast", Reserved: "reserved",
	EmbeddedIPv4: "IPv4-in-IPv6", Invalid: "invalid",
}

// String names the class as messages use it.
func (c Class) String() string {
	if c < 0 || int(c) >= len(classNames) {
		return "invalid"
	}
	return classNames[c]
}

// article is "a" or "an" for the class name.
func (c Class) article() string {
	switch c {
	case Unspecified, EmbeddedIPv4, Invalid:
		return "an"
	}
	return "a"
}

func mustPrefixes(ss ...string) []netip.Prefix {
	ps := make([]netip.Prefix, len(ss))
	for i, s := range ss {
		ps[i] = netip.MustParsePrefix(s)
	}
	return ps
}

var (
	metadataAddrs = []netip.Addr{
		netip.MustParseAddr("169.254.169.254"), // AWS, GCP, Azure, OpenStack…
		netip.MustParseAddr("169.254.170.2"),   // AWS ECS task metadata
		netip.MustParseAddr("fd00:ec2::254"),   // AWS over IPv6
		netip.MustParseAddr("100.100.100.200"), // Alibaba Cloud
	}
	v4Classes = []struct {
		c  Class
		ps []netip.Prefix
	}{
		{Unspecified, mustPrefixes("0.0.0.0/32")},
		{Broadcast, mustPrefixes("255.255.255.255/32")},
		{Loopback, mustPrefixes("127.0.0.0/8")},
		{Private, mustPrefixes("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16")},
		{LinkLocal, mustPrefixes("169.254.0.0/16")},
		{Tailnet, []netip.Prefix{tsaddr.CGNATRange()}}, // 100.64.0.0/10
		{Multicast, mustPrefixes("224.0.0.0/4")},
		{Reserved, mustPrefixes("0.0.0.0/8", "240.0.0.0/4", "192.0.0.0/24", "192.0.2.0/24",
			"198.51.100.0/24", "203.0.113.0/24", "198.18.0.0/15", "192.88.99.0/24")},
	}
	v6Classes = []struct {
		c  Class
		ps []netip.Prefix
	}{
		{Unspecified, mustPrefixes("::/128")},
		{Loopback, mustPrefixes("::1/128")},
		{Tailnet, []netip.Prefix{tsaddr.TailscaleULARange()}}, // fd7a:115c:a1e0::/48
		{Private, mustPrefixes("fc00::/7")},
		{LinkLocal, mustPrefixes("fe80::/10")},
		{Multicast, mustPrefixes("ff00::/8")},
		{Reserved, mustPrefixes("2001:db8::/32", "3fff::/20", "100::/64", "2001::/23")},
	}
	// Prefixes that carry an IPv4 address in their low 32 bits, or at
	// bits 16–48 for 6to4.
	nat64     = mustPrefixes("64:ff9b::/96", "64:ff9b:1::/48")
	compat    = netip.MustParsePrefix("::/96")
	sixToFour = netip.MustParsePrefix("2002::/16")
	teredo    = netip.MustParsePrefix("2001::/32")
	global6   = netip.MustParsePrefix("2000::/3")
)

// Classify says what kind of destination addr is. IPv4-mapped IPv6 is
// classified as its IPv4; NAT64, 6to4, Teredo and IPv4-compatible
// addresses get the class of the IPv4 they carry when it is not public,
// and EmbeddedIPv4 when it is (both refused by default).
func Classify(addr netip.Addr) Class {
	if !addr.IsValid() {
		return Invalid
	}
	addr = addr.WithZone("").Unmap()
	for _, m := range metadataAddrs {
		if addr == m {
			return Metadata
		}
	}
	if addr.Is4() {
		return classify4(addr)
	}
	if v4, ok := embedded4(addr); ok {
		if c := Classify(v4); c != Public {
			return c
		}
		return EmbeddedIPv4
	}
	for _, cl := range v6Classes {
		for _, p := range cl.ps {
			if p.Contains(addr) {
				return cl.c
			}
		}
	}
	if !global6.Contains(addr) {
		return Reserved
	}
	return Public
}

func classify4(addr netip.Addr) Class {
	for _, cl := range v4Classes {
		for _, p := range cl.ps {
			if p.Contains(addr) {
				return cl.c
			}
		}
	}
	return Public
}

// embedded4 extracts the IPv4 address an IPv6 transition form carries.
func embedded4(a netip.Addr) (netip.Addr, bool) {
	b := a.As16()
	low := netip.AddrFrom4([4]byte(b[12:16]))
	switch {
	case a == netip.IPv6Unspecified() || a == netip.IPv6Loopback():
		return netip.Addr{}, false
	case compat.Contains(a):
		return low, true
	case nat64[0].Contains(a) || nat64[1].Contains(a):
		return low, true
	case sixToFour.Contains(a):
		return netip.AddrFrom4([4]byte(b[2:6])), true
	case teredo.Contains(a):
		// The client address is stored inverted in the low 32 bits.
		return netip.AddrFrom4([4]byte{^b[12], ^b[13], ^b[14], ^b[15]}), true
	}
	return netip.Addr{}, false
}

// allowedAddr says whether the proxy may dial addr on port under a:
// public, or inside an explicit AllowCIDRs entry.
func allowedAddr(a *Allowlist, addr netip.Addr, port int) (Class, bool) {
	c := Classify(addr)
	return c, c == Public || a.AllowsAddr(addr, port)
}
