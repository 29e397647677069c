package egress

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// CIDR is an allow_cidrs entry: an address prefix, and the ports it opens
// (Lo through Hi; both 0: every port).
type CIDR struct {
	Prefix netip.Prefix
	Lo, Hi uint16
}

// ParseCIDR reads "10.0.0.0/8" (every port), "127.0.0.1/32:8443",
// "127.0.0.1/32:8000-8099", "[::1]/128:8443" or "fd00::/8" (an IPv6
// prefix takes a port only in brackets). Host bits must be zero, so that
// the range written is the range allowed; a port is 1 to 65535; a range
// runs low to high.
func ParseCIDR(s string) (CIDR, error) {
	pfx, ports, err := splitCIDR(s)
	if err != nil {
		return CIDR{}, err
	}
	p, err := netip.ParsePrefix(pfx)
	if err != nil || p.Addr().Zone() != "" {
		return CIDR{}, fmt.Errorf("%q is not a CIDR (10.0.0.0/8, 127.0.0.1/32:8443, [::1]/128:8443)", s)
	}
	if p.Addr().Is4In6() {
		// Addresses are unmapped before they are matched: a mapped
		// prefix would never match, silently.
		return CIDR{}, fmt.Errorf("%q is an IPv4 range written as IPv6; write it as IPv4 (10.0.0.0/8)", s)
	}
	if p.Masked() != p {
		return CIDR{}, fmt.Errorf("%q has host bits set; write %s", s, p.Masked())
	}
	c := CIDR{Prefix: p}
	if ports == "" {
		return c, nil
	}
	lo, hi, isRange := strings.Cut(ports, "-")
	if !isRange {
		hi = lo
	}
	l, err := parsePort(lo)
	if err != nil {
		return CIDR{}, fmt.Errorf("%q: %w", s, err)
	}
	h, err := parsePort(hi)
	if err != nil {
		return CIDR{}, fmt.Errorf("%q: %w", s, err)
	}
	if l > h {
		return CIDR{}, fmt.Errorf("%q: port range %d-%d runs backwards", s, l, h)
	}
	c.Lo, c.Hi = uint16(l), uint16(h)
	return c, nil
}

// splitCIDR splits off the ports: after "]" for a bracketed prefix, after
// the last ":" for an IPv4 one.
func splitCIDR(s string) (prefix, ports string, err error) {
	if rest, ok := strings.CutPrefix(s, "["); ok {
		pfx, after, ok := strings.Cut(rest, "]")
		if !ok || !strings.Contains(pfx, ":") {
			return "", "", fmt.Errorf("%q: a bracketed CIDR is an IPv6 one, [fd00::]/8:443", s)
		}
		bits, ports, _ := strings.Cut(after, ":")
		if ports == "" && strings.HasSuffix(after, ":") {
			return "", "", fmt.Errorf("%q: empty port", s)
		}
		return pfx + bits, ports, nil
	}
	if strings.Count(s, ":") > 1 || !strings.Contains(s, ".") {
		return s, "", nil // IPv6, ports only in brackets
	}
	pfx, ports, ok := strings.Cut(s, ":")
	if ok && ports == "" {
		return "", "", fmt.Errorf("%q: empty port", s)
	}
	return pfx, ports, nil
}

// Contains says whether addr (an IPv4-mapped address compared as IPv4)
// on port is inside the entry.
func (c CIDR) Contains(addr netip.Addr, port int) bool {
	if c.Lo != 0 && (port < int(c.Lo) || port > int(c.Hi)) {
		return false
	}
	return c.Prefix.Contains(addr.Unmap().WithZone(""))
}

// AnyPort says whether the entry opens every port.
func (c CIDR) AnyPort() bool { return c.Lo == 0 }

// String is the entry as a policy writes it.
func (c CIDR) String() string {
	if c.Lo == 0 {
		return c.Prefix.String()
	}
	s := c.Prefix.String()
	if c.Prefix.Addr().Is6() {
		s = "[" + c.Prefix.Addr().String() + "]/" + strconv.Itoa(c.Prefix.Bits())
	}
	if c.Lo == c.Hi {
		return fmt.Sprintf("%s:%d", s, c.Lo)
	}
	return fmt.Sprintf("%s:%d-%d", s, c.Lo, c.Hi)
}
