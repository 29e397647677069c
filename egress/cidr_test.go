package egress

import (
	"net/netip"
	"strconv"
	"strings"
	"testing"
)

var cidrCases = []struct {
	in, want, err string
}{
	{"10.0.0.0/8", "10.0.0.0/8", ""},
	{"::ffff:10.0.0.0/104", "", "written as IPv6"}, // never matched: addresses are unmapped first
	{"[::ffff:10.0.0.0]/104:443", "", "written as IPv6"},
	{"[::ffff:127.0.0.1]/128:8443", "", "written as IPv6"},
	{"127.0.0.1/32:8443", "127.0.0.1/32:8443", ""},
	{"127.0.0.0/8:8000-8099", "127.0.0.0/8:8000-8099", ""},
	{"[::1]/128:8443", "[::1]/128:8443", ""},
	{"[fd00::]/8:1-65535", "[fd00::]/8:1-65535", ""},
	{"fd00::/8", "fd00::/8", ""},
	{"::1/128", "::1/128", ""},
	// Hostile and malformed.
	{"127.0.0.1/8", "", "host bits set"},
	{"127.0.0.1/32:", "", "empty port"},
	{"127.0.0.1/32:0", "", "1 to 65535"},
	{"127.0.0.1/32:65536", "", "1 to 65535"},
	{"127.0.0.1/32:+443", "", "1 to 65535"},
	{"127.0.0.1/32:-443", "", "1 to 65535"},
	{"127.0.0.1/32:443-", "", "1 to 65535"},
	{"127.0.0.1/32:9-8", "", "runs backwards"},
	{"127.0.0.1/32:1-2-3", "", "1 to 65535"},
	{"127.0.0.1/32:0x1bb", "", "1 to 65535"},
	{"127.0.0.1/32: 443", "", "1 to 65535"},
	{"127.0.0.1/32:443:80", "", "not a CIDR"},
	{"127.0.0.1:443", "", "not a CIDR"},
	{"127.0.0.1", "", "not a CIDR"},
	{"[127.0.0.1]/32:443", "", "IPv6"},
	{"[::1]/128:", "", "empty port"},
	{"[::1/128:443", "", "IPv6"},
	{"::1/128:443", "", "not a CIDR"},
	{"[fe80::1%eth0]/128:443", "", "not a CIDR"},
	{"[::1]:443/128", "", "not a CIDR"},
	{"", "", "not a CIDR"},
	{"localhost/32:443", "", "not a CIDR"},
}

func TestParseCIDR(t *testing.T) {
	for _, tc := range cidrCases {
		c, err := ParseCIDR(tc.in)
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("ParseCIDR(%q) = %v, %v; want an error containing %q", tc.in, c, err, tc.err)
		case tc.err == "" && (err != nil || c.String() != tc.want):
			t.Errorf("ParseCIDR(%q) = %v, %v; want %s", tc.in, c, err, tc.want)
		}
	}
}

func TestCIDRContains(t *testing.T) {
	one, _ := ParseCIDR("127.0.0.1/32:8443")
	span, _ := ParseCIDR("[::1]/128:8000-8099")
	all, _ := ParseCIDR("127.0.0.0/8")
	for _, tc := range []struct {
		c    CIDR
		addr string
		port int
		want bool
	}{
		{one, "127.0.0.1", 8443, true},
		{one, "::ffff:127.0.0.1", 8443, true},
		{one, "127.0.0.1", 22, false},
		{one, "127.0.0.1", 8444, false},
		{one, "127.0.0.2", 8443, false},
		{span, "::1", 8000, true},
		{span, "::1", 8099, true},
		{span, "::1", 8100, false},
		{span, "::1", 7999, false},
		{all, "127.9.9.9", 1, true},
		{all, "127.9.9.9", 65535, true},
	} {
		if got := tc.c.Contains(netip.MustParseAddr(tc.addr), tc.port); got != tc.want {
			t.Errorf("%v.Contains(%s, %d) = %v, want %v", tc.c, tc.addr, tc.port, got, tc.want)
		}
	}
}

// FuzzParseCIDR: never panics; what parses writes itself back the same,
// and contains only the ports it names.
func FuzzParseCIDR(f *testing.F) {
	for _, tc := range cidrCases {
		f.Add(tc.in, 443)
	}
	f.Fuzz(func(t *testing.T, s string, port int) {
		c, err := ParseCIDR(s)
		if err != nil {
			return
		}
		again, err := ParseCIDR(c.String())
		if err != nil || again != c {
			t.Fatalf("%q parsed as %v, which reads back as %v, %v", s, c, again, err)
		}
		if c.Lo != 0 && c.Contains(c.Prefix.Addr(), port) != (port >= int(c.Lo) && port <= int(c.Hi)) {
			t.Fatalf("%v contains port %d: %v", c, port, !c.Contains(c.Prefix.Addr(), port))
		}
		if c.Lo == 0 && !strings.Contains(s, ":"+strconv.Itoa(port)) && !c.Contains(c.Prefix.Addr(), port) {
			t.Fatalf("%v does not contain port %d", c, port)
		}
	})
}
