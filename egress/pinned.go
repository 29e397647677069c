package egress

import (
	"context"
	"net/netip"
	"slices"
	"strings"
)

// Pinned is a Resolver that answers names of Hosts with their pinned
// addresses (the policy's `hosts:`, like curl --resolve) and asks Next
// for every other name. The proxy guards pinned addresses like any other.
type Pinned struct {
	Hosts map[string][]netip.Addr // lower-case names without a trailing dot
	Next  Resolver
}

// LookupNetIP implements Resolver. A pinned name whose addresses do not
// fit network ("ip4", "ip6") resolves to nothing rather than to DNS.
func (p Pinned) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	addrs, ok := p.Hosts[strings.TrimSuffix(strings.ToLower(host), ".")]
	if !ok {
		return p.Next.LookupNetIP(ctx, network, host)
	}
	return slices.DeleteFunc(slices.Clone(addrs), func(a netip.Addr) bool {
		return network == "ip4" && !a.Is4() || network == "ip6" && !a.Is6()
	}), nil
}
