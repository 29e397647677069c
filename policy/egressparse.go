package policy

import (
	"coily.dev/coily/egress"

	"errors"
	"fmt"
	"maps"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// egressFile is a rule's `egress:` block as written.
type egressFile struct {
	Mode       string              `yaml:"mode"`
	Allow      []string            `yaml:"allow"`
	Presets    []string            `yaml:"presets"`
	AllowCIDRs []string            `yaml:"allow_cidrs"`
	Registries map[string]string   `yaml:"registries"`
	Hosts      map[string][]string `yaml:"hosts"`
	KnownHosts []string            `yaml:"ssh_known_hosts"`
	MaxConns   int                 `yaml:"max_connections"`
	MaxBytes   string              `yaml:"max_bytes"`
	Inspect    []string            `yaml:"inspect"`
	HTTP       map[string][]string `yaml:"http"`
	MaxBody    string              `yaml:"max_body"`
	Inject     []injectFile        `yaml:"inject"`
}

// MaxEgressConns bounds a rule's max_connections (the server-wide budget
// bounds all execs together).
const MaxEgressConns = 1024

// ruleEgress reads an allow rule's egress block; it needs network proxied.
func (b *builder) ruleEgress(r *Rule, rf ruleFile, rn ruleNode) {
	if rf.Egress == nil {
		return
	}
	i := ruleIndex(b, rn)
	at := func(path ...any) []any { return append([]any{"commands", i, "egress"}, path...) }
	if r.Network != NetworkProxied {
		b.failAt(rn.at("egress"), "rule %q: egress needs network: proxied, got network %q", r.Name, r.Network)
	}
	ef := rf.Egress
	e := &Egress{Mode: ef.Mode, Presets: ef.Presets, Registries: ef.Registries}
	if mode, err := parseEgressMode(ef.Mode); err != nil {
		b.failAt(b.at(at("mode")...), "rule %q: %v", r.Name, err)
	} else {
		e.Mode = mode
	}
	for j, s := range ef.Allow {
		hp, err := ParseHostPort(s)
		if err != nil {
			b.failAt(b.at(at("allow", j)...), "rule %q: egress allow: %v", r.Name, err)
		}
		e.Allow = append(e.Allow, hp)
	}
	for j, s := range ef.AllowCIDRs {
		p, err := parseCIDR(s)
		if err != nil {
			b.failAt(b.at(at("allow_cidrs", j)...), "rule %q: egress allow_cidrs: %v", r.Name, err)
		}
		e.CIDRs = append(e.CIDRs, p)
	}
	for j, name := range ef.Presets {
		if err := checkEgressPreset(name); err != nil {
			b.failAt(b.at(at("presets", j)...), "rule %q: %v", r.Name, err)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(ef.Registries)) {
		b.egressRegistry(r.Name, e, name, at("registries"))
	}
	for _, name := range slices.Sorted(maps.Keys(ef.Hosts)) {
		b.egressHost(r.Name, e, name, ef.Hosts[name], at("hosts"))
	}
	b.egressInspect(r, e, ef, at)
	e.SSHKnownHosts = b.knownHosts(r.Name, ef.KnownHosts, at("ssh_known_hosts"))
	if ef.MaxConns < 0 || ef.MaxConns > MaxEgressConns {
		b.failAt(b.at(at("max_connections")...), "rule %q: egress max_connections %d must be between 1 and %d", r.Name, ef.MaxConns, MaxEgressConns)
	}
	e.MaxConns = ef.MaxConns
	if ef.MaxBytes != "" {
		n, err := ParseSize(ef.MaxBytes)
		if err != nil || n <= 0 {
			b.failAt(b.at(at("max_bytes")...), "rule %q: egress max_bytes %q: a size such as 512MiB", r.Name, ef.MaxBytes)
		}
		e.MaxBytes = n
	}
	r.Egress = e
}

// egressInspect reads inspect, http, max_body and inject: the hosts
// whose TLS the proxy terminates and what it checks and injects there.
func (b *builder) egressInspect(r *Rule, e *Egress, ef *egressFile, at func(...any) []any) {
	if err := checkInspect(e, ef.Inspect); err != nil {
		b.failAt(b.at(at("inspect")...), "rule %q: %v", r.Name, err)
		return
	}
	entries := b.injectEntries(r, e, ef, at)
	if err := checkHTTPRules(e, ef.HTTP); err != nil {
		b.failAt(b.at(at("http")...), "rule %q: %v", r.Name, err)
	}
	if ef.MaxBody != "" {
		n, err := ParseSize(ef.MaxBody)
		if err != nil || n <= 0 || len(e.Inspect) == 0 {
			b.failAt(b.at(at("max_body")...), "rule %q: egress max_body %q: a size such as 1MiB, with inspect", r.Name, ef.MaxBody)
		}
		e.MaxBody = n
	}
	for _, f := range entries {
		in, err := checkInject(r, e, f.injectFile)
		if err != nil {
			b.failAt(b.at(at("inject", f.at)...), "rule %q: %v", r.Name, err)
			continue
		}
		e.Inject = append(e.Inject, in)
	}
	if _, err := SigV4Groups(e.Inject); err != nil {
		b.failAt(b.at(at("inject")...), "rule %q: %v", r.Name, err)
	}
}

// injectEntry is an `inject` entry as written or as a preset expands
// it, with the index of the entry written.
type injectEntry struct {
	injectFile
	at int
}

// injectEntries expands the presets of `inject` (inspecting their hosts).
func (b *builder) injectEntries(r *Rule, e *Egress, ef *egressFile, at func(...any) []any) []injectEntry {
	var out []injectEntry
	for j, f := range ef.Inject {
		if f.Preset == "" {
			out = append(out, injectEntry{f, j})
			continue
		}
		fs, err := expandInjectPreset(e, f)
		if err != nil {
			b.failAt(b.at(at("inject", j)...), "rule %q: %v", r.Name, err)
			continue
		}
		for _, x := range fs {
			out = append(out, injectEntry{x, j})
		}
	}
	return out
}

// egressRegistry checks one `registries:` entry: a preset of this rule
// with package hosts, and an https URL naming a host.
func (b *builder) egressRegistry(rule string, e *Egress, name string, at []any) {
	p, known := egressPresets[name]
	switch {
	case !known:
		b.failAt(keyOf(b.at(at...), name), "rule %q: egress registries: unknown preset %q", rule, name)
	case !slices.Contains(e.Presets, name):
		b.failAt(keyOf(b.at(at...), name), "rule %q: egress registries: preset %q is not in this rule's presets", rule, name)
	case len(p.Registry) == 0:
		b.failAt(keyOf(b.at(at...), name), "rule %q: egress registries: preset %q has no package registry to replace", rule, name)
	}
	if _, err := registryHost(e.Registries[name]); err != nil {
		b.failAt(b.at(append(at, name)...), "rule %q: egress registries: %s: %v", rule, name, err)
	}
}

// maxPinnedAddrs bounds the addresses one `hosts:` name may list.
const maxPinnedAddrs = 16

// egressHost checks one `hosts:` entry: an exact DNS name and 1 to
// maxPinnedAddrs IP addresses without zones, which the proxy uses for the
// name instead of asking DNS.
func (b *builder) egressHost(rule string, e *Egress, name string, addrs []string, at []any) {
	hp, err := ParseHostPort(name)
	switch {
	case err != nil:
		b.failAt(keyOf(b.at(at...), name), "rule %q: egress hosts: %v", rule, err)
		return
	case hp.Suffix || hp.Port != 0:
		b.failAt(keyOf(b.at(at...), name), "rule %q: egress hosts: %q must be one host name, without wildcard or port", rule, name)
		return
	case len(addrs) == 0 || len(addrs) > maxPinnedAddrs:
		b.failAt(b.at(append(at, name)...), "rule %q: egress hosts: %s needs 1 to %d addresses", rule, name, maxPinnedAddrs)
		return
	}
	var out []netip.Addr
	for j, a := range addrs {
		ip, err := netip.ParseAddr(a)
		if err != nil || ip.Zone() != "" {
			b.failAt(b.at(append(at, name, j)...), "rule %q: egress hosts: %s: %q is not an IP address (no zone)", rule, name, a)
			continue
		}
		out = append(out, ip.Unmap())
	}
	if e.Hosts == nil {
		e.Hosts = map[string][]netip.Addr{}
	}
	e.Hosts[hp.Host] = out
}

// registryHost is the host (and port, 443 by default) of a mirror URL:
// https only, no credentials, a DNS name.
func registryHost(raw string) (HostPort, error) {
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		return HostPort{}, errors.New("registry is not a URL")
	case u.Scheme != "https":
		return HostPort{}, fmt.Errorf("URL %q must be https", raw)
	case u.User != nil:
		return HostPort{}, fmt.Errorf("URL %q must not carry credentials (use credentials:)", redactUser(u))
	case u.Host == "":
		return HostPort{}, fmt.Errorf("URL %q names no host", raw)
	}
	host, port := u.Host, "443"
	if u.Port() != "" || strings.HasSuffix(u.Host, ":") {
		host, port = u.Hostname(), u.Port()
	}
	hp, err := ParseHostPort(host + ":" + port)
	if err != nil {
		return HostPort{}, fmt.Errorf("URL %q: %w", raw, err)
	}
	if hp.Suffix {
		return HostPort{}, fmt.Errorf("URL %q: a mirror names one host, not a wildcard", raw)
	}
	return hp, nil
}

func redactUser(u *url.URL) string {
	c := *u
	c.User = url.User("REDACTED")
	return c.String()
}

// ParseHostPort parses an allowlist entry, HOST[:PORT]: a DNS name (lower
// cased) or `*.` and a name of at least two labels, matching its
// sub-domains only; PORT from 1 to 65535. IP literals are refused: they
// belong in allow_cidrs.
func ParseHostPort(s string) (HostPort, error) {
	if strings.Count(s, ":") > 1 || strings.HasPrefix(s, "[") {
		return HostPort{}, fmt.Errorf("%q: IP literals go in allow_cidrs", s)
	}
	var hp HostPort
	host, port, hasPort := strings.Cut(s, ":")
	if hasPort {
		p, err := parsePort(port)
		if err != nil {
			return HostPort{}, fmt.Errorf("%q: %w", s, err)
		}
		hp.Port = p
	}
	host = strings.ToLower(host)
	if rest, ok := cutWildcard(host); ok {
		hp.Suffix, host = true, rest
		if !strings.Contains(host, ".") {
			return HostPort{}, fmt.Errorf("%q: a wildcard needs a domain of at least two labels (*.example.com)", s)
		}
	}
	if err := checkHostName(host); err != nil {
		return HostPort{}, fmt.Errorf("%q: %w", s, err)
	}
	hp.Host = host
	// The proxy matches requests with egress's own reading of the entry:
	// the policy's stricter grammar must read every entry it accepts the
	// same way, or the owner would allow one host and the proxy another.
	if e, err := egress.ParseEntry(hp.String()); err != nil || e != (egress.Entry{Host: hp.Host, Suffix: hp.Suffix, Port: hp.Port}) {
		return HostPort{}, fmt.Errorf("%q: the egress proxy reads this entry differently (%+v, %v)", s, e, err)
	}
	return hp, nil
}

func cutWildcard(host string) (string, bool) { return strings.CutPrefix(host, "*.") }

func parsePort(s string) (int, error) {
	p, err := strconv.Atoi(s)
	if err != nil || p < 1 || p > 65535 || s[0] < '1' || s[0] > '9' {
		return 0, fmt.Errorf("port %q must be a number from 1 to 65535", s)
	}
	return p, nil
}

// checkHostName accepts a DNS name: labels of 1 to 63 letters, digits and
// inner hyphens, 253 characters at most, no trailing dot, and a last label
// that is not all digits (so no IPv4 literal in any of its spellings).
func checkHostName(host string) error {
	switch {
	case host == "":
		return errors.New("empty host")
	case strings.Contains(host, "*"):
		return errors.New("a wildcard may only be a leading *. (*.example.com)")
	case strings.HasSuffix(host, "."):
		return errors.New("host must not end with a dot")
	case len(host) > 253:
		return errors.New("host longer than 253 characters")
	}
	if _, err := netip.ParseAddr(host); err == nil {
		return errors.New("IP literals go in allow_cidrs")
	}
	labels := strings.Split(host, ".")
	for _, l := range labels {
		if !validLabel(l) {
			return fmt.Errorf("bad DNS label %q (letters, digits and inner hyphens, 1 to 63)", l)
		}
	}
	if last := labels[len(labels)-1]; strings.Trim(last, "0123456789") == "" || strings.HasPrefix(last, "0x") {
		return errors.New("looks like an IP address; IP literals go in allow_cidrs")
	}
	return nil
}

func validLabel(l string) bool {
	if len(l) == 0 || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
		return false
	}
	for _, c := range l {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// parseCIDR parses an allow_cidrs entry (egress.ParseCIDR): host bits
// must be zero, so that the range written is the range allowed.
func parseCIDR(s string) (egress.CIDR, error) { return egress.ParseCIDR(s) }
