package egress

import (
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
)

// ErrTarget is wrapped by every error the request-target parsers return.
var ErrTarget = errors.New("egress: bad request target")

// Target is a parsed destination: a normalized host name, or an IP
// literal (Addr valid, Host its string form), and a port.
type Target struct {
	Host string
	Addr netip.Addr
	Port int
}

// String is host:port, with IPv6 literals bracketed.
func (t Target) String() string {
	if t.Addr.IsValid() {
		return netip.AddrPortFrom(t.Addr, uint16(t.Port)).String()
	}
	return t.Host + ":" + strconv.Itoa(t.Port)
}

// ParseAuthority parses `host:port`, `[v6]:port`, or, with defaultPort
// non-zero, a bare host or `[v6]`. Userinfo, empty hosts, zones, control
// bytes and out-of-range ports are refused.
func ParseAuthority(s string, defaultPort int) (Target, error) {
	fail := func(why string) (Target, error) {
		return Target{}, fmt.Errorf("%w: %q: %s", ErrTarget, s, why)
	}
	if len(s) > maxHostLen+8 {
		return fail("too long")
	}
	if strings.ContainsAny(s, "@/?#%\\ ") || strings.IndexFunc(s, isControl) >= 0 {
		return fail("not a host:port (no userinfo, path, spaces or control bytes)")
	}
	host, portStr, hasPort := s, "", false
	if strings.HasPrefix(s, "[") {
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return fail("unclosed '['")
		}
		host = s[1:end]
		rest := s[end+1:]
		if rest != "" {
			p, ok := strings.CutPrefix(rest, ":")
			if !ok {
				return fail("junk after ']'")
			}
			portStr, hasPort = p, true
		}
		a, err := netip.ParseAddr(host)
		if err != nil || !a.Is6() || a.Zone() != "" {
			return fail("not an IPv6 address in brackets")
		}
	} else if i := strings.LastIndexByte(s, ':'); i >= 0 {
		host, portStr, hasPort = s[:i], s[i+1:], true
		if strings.Contains(host, ":") {
			return fail("IPv6 addresses need brackets")
		}
	}
	t := Target{Port: defaultPort}
	if hasPort {
		p, err := parsePort(portStr)
		if err != nil {
			return fail(err.Error())
		}
		t.Port = p
	}
	if t.Port == 0 {
		return fail("missing port")
	}
	if a, err := netip.ParseAddr(host); err == nil {
		t.Addr, t.Host = a, a.String()
		return t, nil
	}
	h, err := normalizeHost(host)
	if err != nil {
		return fail(err.Error())
	}
	t.Host = h
	return t, nil
}

// ParseAbsoluteHTTP parses the request-target of a plain HTTP proxy
// request: `http://host[:port]/path?query`, no userinfo. https:// is
// refused (it must come as CONNECT).
func ParseAbsoluteHTTP(s string) (Target, *url.URL, error) {
	if strings.IndexFunc(s, isControl) >= 0 {
		return Target{}, nil, fmt.Errorf("%w: control bytes", ErrTarget)
	}
	u, err := url.Parse(s)
	if err != nil {
		return Target{}, nil, fmt.Errorf("%w: %w", ErrTarget, err)
	}
	if u.Scheme != "http" {
		return Target{}, nil, fmt.Errorf("%w: scheme %q: use CONNECT for anything but http://", ErrTarget, u.Scheme)
	}
	if u.User != nil || u.Opaque != "" {
		return Target{}, nil, fmt.Errorf("%w: userinfo or opaque URL", ErrTarget)
	}
	t, err := ParseAuthority(u.Host, 80)
	if err != nil {
		return Target{}, nil, err
	}
	return t, u, nil
}

func isControl(r rune) bool { return r < 0x20 || r == 0x7f }
