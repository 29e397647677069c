package egress

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// Mode says what the proxy does with a host outside the allowlist.
type Mode int

const (
	// Enforce refuses a host outside the allowlist.
	Enforce Mode = iota
	// Observe lets it through and records the would-be denial.
	Observe
)

// String is "enforce" or "observe".
func (m Mode) String() string {
	if m == Observe {
		return "observe"
	}
	return "enforce"
}

// ParseMode parses "enforce" or "observe".
func ParseMode(s string) (Mode, error) {
	switch s {
	case "enforce":
		return Enforce, nil
	case "observe":
		return Observe, nil
	}
	return Enforce, fmt.Errorf("egress: mode %q: want enforce or observe", s)
}

// ErrEntry is wrapped by every error ParseEntry returns.
var ErrEntry = errors.New("egress: bad allowlist entry")

// maxHostLen is the longest DNS name (RFC 1035, without the trailing dot).
const maxHostLen = 253

// Entry is one allowlist entry: an exact host, or with Suffix set every
// strict sub-domain of Host; Port 0 means the request kind's default
// (443 for CONNECT, 80 for plain HTTP).
type Entry struct {
	Host   string
	Suffix bool
	Port   int
}

// String renders the entry as it would be written.
func (e Entry) String() string {
	s := e.Host
	if e.Suffix {
		s = "*." + s
	}
	if e.Port != 0 {
		s += ":" + strconv.Itoa(e.Port)
	}
	return s
}

// ParseEntry parses `host`, `*.suffix`, each with an optional `:port`.
// IP literals are refused: addresses are allowed by CIDR only.
func ParseEntry(s string) (Entry, error) {
	if len(s) > maxHostLen+7 {
		return Entry{}, fmt.Errorf("%w: longer than %d bytes", ErrEntry, maxHostLen+7)
	}
	if strings.HasPrefix(s, "[") || strings.Count(s, ":") > 1 {
		return Entry{}, fmt.Errorf("%w: %q looks like an IPv6 address; allow addresses with allow_cidrs", ErrEntry, s)
	}
	var e Entry
	host := s
	if i := strings.LastIndexByte(s, ':'); i >= 0 {
		p, err := parsePort(s[i+1:])
		if err != nil {
			return Entry{}, fmt.Errorf("%w: %q: %w", ErrEntry, s, err)
		}
		host, e.Port = s[:i], p
	}
	if rest, ok := strings.CutPrefix(host, "*."); ok {
		host, e.Suffix = rest, true
	}
	h, err := normalizeHost(host)
	if err != nil {
		return Entry{}, fmt.Errorf("%w: %q: %w", ErrEntry, s, err)
	}
	if e.Suffix && !strings.Contains(h, ".") {
		return Entry{}, fmt.Errorf("%w: %q: a suffix needs at least two labels (*.example.com)", ErrEntry, s)
	}
	e.Host = h
	return e, nil
}

// parsePort accepts decimal 1–65535, digits only.
func parsePort(s string) (int, error) {
	if s == "" || len(s) > 5 || strings.Trim(s, "0123456789") != "" {
		return 0, fmt.Errorf("port %q is not a number from 1 to 65535", s)
	}
	p, _ := strconv.Atoi(s)
	if p < 1 || p > 65535 {
		return 0, fmt.Errorf("port %q is not a number from 1 to 65535", s)
	}
	return p, nil
}

// normalizeHost lower-cases a DNS name, trims one trailing dot, and checks
// its labels: letters, digits, '-' and '_', 1–63 bytes each, not all
// digits in the last label (that would be an address), no IP literals.
func normalizeHost(h string) (string, error) {
	h = strings.ToLower(strings.TrimSuffix(h, "."))
	if h == "" {
		return "", errors.New("empty host")
	}
	if len(h) > maxHostLen {
		return "", fmt.Errorf("host longer than %d bytes", maxHostLen)
	}
	if _, err := netip.ParseAddr(h); err == nil {
		return "", errors.New("an IP address, not a host name; allow addresses with allow_cidrs")
	}
	labels := strings.Split(h, ".")
	for _, l := range labels {
		if err := checkLabel(l); err != nil {
			return "", err
		}
	}
	if strings.Trim(labels[len(labels)-1], "0123456789") == "" {
		return "", errors.New("last label is numeric: not a host name")
	}
	return h, nil
}

func checkLabel(l string) error {
	if l == "" || len(l) > 63 {
		return fmt.Errorf("label %q must be 1 to 63 bytes", l)
	}
	for i := 0; i < len(l); i++ {
		c := l[i]
		ok := c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_'
		if !ok {
			return fmt.Errorf("label %q has a byte 0x%02x outside [a-z0-9-_]", l, c)
		}
	}
	if l[0] == '-' || l[len(l)-1] == '-' {
		return fmt.Errorf("label %q starts or ends with '-'", l)
	}
	return nil
}

// Allowlist is the set of destinations a rule allows: host entries, and
// the address prefixes and ports (AllowCIDRs) that may be dialed even when
// they are not public. The zero value allows nothing.
type Allowlist struct {
	Entries    []Entry
	AllowCIDRs []CIDR
}

// NewAllowlist parses entries and keeps cidrs (masked).
func NewAllowlist(entries []string, cidrs []CIDR) (*Allowlist, error) {
	a := &Allowlist{}
	for _, s := range entries {
		e, err := ParseEntry(s)
		if err != nil {
			return nil, err
		}
		a.Entries = append(a.Entries, e)
	}
	for _, c := range cidrs {
		if !c.Prefix.IsValid() || c.Lo > c.Hi {
			return nil, fmt.Errorf("egress: invalid CIDR %v", c)
		}
		c.Prefix = c.Prefix.Masked()
		a.AllowCIDRs = append(a.AllowCIDRs, c)
	}
	return a, nil
}

// AllowsHost says whether host:port matches an entry; defaultPort is the
// request kind's default, which entries without a port stand for. host
// must already be normalized (lower case, no trailing dot).
func (a *Allowlist) AllowsHost(host string, port, defaultPort int) bool {
	if a == nil {
		return false
	}
	for _, e := range a.Entries {
		want := e.Port
		if want == 0 {
			want = defaultPort
		}
		if want != port {
			continue
		}
		if !e.Suffix && host == e.Host || e.Suffix && strings.HasSuffix(host, "."+e.Host) {
			return true
		}
	}
	return false
}

// AllowsAddr says whether an AllowCIDRs entry contains addr on port (an
// IPv4-mapped address is compared as IPv4).
func (a *Allowlist) AllowsAddr(addr netip.Addr, port int) bool {
	if a == nil {
		return false
	}
	for _, c := range a.AllowCIDRs {
		if c.Contains(addr, port) {
			return true
		}
	}
	return false
}
