package policy

import (
	"fmt"
	"net/netip"
	"slices"

	"coily.dev/coily/egress"
)

// opens says whether an allow_cidrs entry lets the proxy dial addr on
// port.
func (e *Egress) opens(addr netip.Addr, port int) bool {
	return slices.ContainsFunc(e.CIDRs, func(c egress.CIDR) bool { return c.Contains(addr, port) })
}

// Unreachable says, for an enforced block, which hosts the rule names but
// the proxy would refuse: a host pinned (`hosts:`) only to guarded
// addresses (loopback, private…) that no allow_cidrs entry opens on the
// port an allow entry or an ssh host key names it with. Each line ends
// with the fix.
func (e *Egress) Unreachable() []string {
	if e == nil || e.Mode == EgressObserve {
		return nil
	}
	var out []string
	check := func(host string, port int, what string) {
		addrs, pinned := e.Hosts[host]
		if !pinned || slices.ContainsFunc(addrs, func(a netip.Addr) bool {
			return egress.Classify(a) == egress.Public || e.opens(a, port)
		}) {
			return
		}
		fix := netip.PrefixFrom(addrs[0].Unmap(), addrs[0].Unmap().BitLen())
		out = append(out, fmt.Sprintf("%s %s:%d is pinned to %v, which no allow_cidrs entry opens on port %d: the proxy refuses it (add %s to egress.allow_cidrs)",
			what, host, port, addrs, port, egress.CIDR{Prefix: fix, Lo: uint16(port), Hi: uint16(port)}))
	}
	for _, hp := range e.Effective() {
		if hp.Suffix {
			continue
		}
		if hp.Port != 0 {
			check(hp.Host, hp.Port, "host")
			continue
		}
		check(hp.Host, 443, "host")
	}
	for _, k := range e.SSHKnownHosts {
		for _, h := range k.Hosts {
			check(h.Host, h.Port, "ssh host")
		}
	}
	return out
}
