package sandbox

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
)

// proxyVars are the variables HTTP clients read their proxy from, in both
// spellings; NoProxy goes into the NO_PROXY pair.
var proxyVars = []string{"HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"}

// NoProxy is the NO_PROXY of a proxied command (as `coily __netbridge`
// sets it on Linux).
const NoProxy = "localhost,127.0.0.1"

// ParseProxyAddr parses a Profile.ProxyAddr: exactly "127.0.0.1:PORT" or
// "[::1]:PORT", PORT from 1 to 65535 written canonically (no sign, no
// leading zero). Nothing else is accepted: no other loopback address, no
// name, no zone, no spaces; what the sandbox is opened to must be the
// proxy's own listener.
func ParseProxyAddr(s string) (netip.AddrPort, error) {
	ap, err := netip.ParseAddrPort(s)
	switch {
	case err != nil:
		return netip.AddrPort{}, fmt.Errorf("proxy address %q: %w", s, err)
	case ap.Addr() != netip.AddrFrom4([4]byte{127, 0, 0, 1}) && ap.Addr() != netip.IPv6Loopback():
		return netip.AddrPort{}, fmt.Errorf("proxy address %q: not 127.0.0.1 or [::1]", s)
	case ap.Port() == 0:
		return netip.AddrPort{}, fmt.Errorf("proxy address %q: port 0", s)
	case ap.String() != s:
		return netip.AddrPort{}, fmt.Errorf("proxy address %q: not written as %s", s, ap)
	}
	return ap, nil
}

// ProxyEnv is the environment that points a command's HTTP clients at the
// egress proxy at ap: HTTP_PROXY, HTTPS_PROXY and ALL_PROXY (each in both
// spellings) set to http://ap, and NO_PROXY/no_proxy to NoProxy.
func ProxyEnv(ap netip.AddrPort) []string {
	url := "http://" + ap.String()
	out := make([]string, 0, len(proxyVars)+2)
	for _, k := range proxyVars {
		out = append(out, k+"="+url)
	}
	return append(out, "NO_PROXY="+NoProxy, "no_proxy="+NoProxy)
}

// WithProxyEnv is env without any proxy variable of its own, then
// ProxyEnv(ap): a command can only be pointed at its own egress proxy.
func WithProxyEnv(env []string, ap netip.AddrPort) []string {
	out := slices.DeleteFunc(slices.Clone(env), func(kv string) bool {
		k, _, _ := strings.Cut(kv, "=")
		return slices.Contains(proxyVars, k) || k == "NO_PROXY" || k == "no_proxy"
	})
	return append(out, ProxyEnv(ap)...)
}
