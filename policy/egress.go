package policy

import (
	"net/netip"

	"coily.dev/coily/egress"
	"slices"
	"strconv"
	"strings"
)

// Egress modes a rule's `egress.mode` may name.
const (
	// EgressEnforce lets the command reach only its effective allowlist.
	EgressEnforce = "enforce"
	// EgressObserve lets the command reach any host and records each one.
	EgressObserve = "observe"
)

// Egress is an allow rule's `egress:` block: what a command run with
// network proxied may reach through the egress proxy. It is plain data;
// the server hands it to the proxy of each exec.
type Egress struct {
	// Mode is EgressEnforce (the default) or EgressObserve.
	Mode string
	// Allow are the hosts the rule names itself, in order.
	Allow []HostPort
	// CIDRs are the private or otherwise guarded ranges the rule allows
	// by address (`allow_cidrs`), each in its masked form, with the ports
	// it opens.
	CIDRs []egress.CIDR
	// Presets name entries of the table pinned in code (EgressPresets).
	Presets []string
	// Registries maps a preset to the https URL of a mirror: its host
	// replaces the preset's package hosts.
	Registries map[string]string
	// Hosts pins names to addresses (`hosts:`): the proxy uses these
	// instead of asking DNS, like curl --resolve. The addresses are still
	// guarded: a private or loopback one needs an allow_cidrs entry.
	Hosts map[string][]netip.Addr
	// SSHKnownHosts are the ssh host keys git over ssh trusts, and the
	// only ones (`ssh_known_hosts`); KnownHostsFile writes them out.
	SSHKnownHosts []KnownHost
	// MaxConns caps the exec's connections open at once (0: the proxy's
	// default, 64); MaxBytes caps the bytes up and down over the exec
	// (0: no cap).
	MaxConns int
	MaxBytes int64
	// Inspect are the hosts whose TLS the proxy terminates with a CA of
	// the exec's own (`inspect`); HTTP their method and path rules
	// (`http`, unparsed: HTTPRules), MaxBody the cap of each request body
	// there; Inject the credentials the proxy puts in their requests in
	// place of a placeholder the child holds (`inject`).
	Inspect []string
	HTTP    map[string][]string
	MaxBody int64
	Inject  []Inject
}

// HostPort is one allowlist entry. Host is lower case without a trailing
// dot; with Suffix it matches sub-domains of Host only (`*.Host`), never
// Host itself. Port 0 means the default ports: 443 and 80.
type HostPort struct {
	Host   string
	Port   int
	Suffix bool
}

// String is the entry as a policy writes it: "*.example.com:8443".
func (h HostPort) String() string {
	s := h.Host
	if h.Suffix {
		s = "*." + s
	}
	if h.Port != 0 {
		s += ":" + strconv.Itoa(h.Port)
	}
	return s
}

// Match reports whether host (any case, an optional trailing dot) and
// port are allowed by this entry. An entry without a port matches 443 and
// 80 here; the proxy is stricter and knows how the host was asked for:
// 443 by CONNECT, 80 by plain HTTP.
func (h HostPort) Match(host string, port int) bool {
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	switch {
	case h.Port == 0 && port != 443 && port != 80:
		return false
	case h.Port != 0 && port != h.Port:
		return false
	case h.Suffix:
		return strings.HasSuffix(host, "."+h.Host) && len(host) > len(h.Host)+1
	default:
		return host == h.Host
	}
}

// Effective is the allowlist with presets expanded: the rule's own
// entries, then each preset's hosts (a mirror's host in place of the
// package hosts of a preset with a registry), without duplicates. A nil
// Egress has none.
func (e *Egress) Effective() []HostPort {
	if e == nil {
		return nil
	}
	out := slices.Clone(e.Allow)
	add := func(hs ...HostPort) {
		for _, h := range hs {
			if !slices.Contains(out, h) {
				out = append(out, h)
			}
		}
	}
	for _, name := range e.Presets {
		p := egressPresets[name]
		if mirror, ok := e.Registries[name]; ok {
			if hp, err := registryHost(mirror); err == nil {
				add(hp)
			}
		} else {
			add(p.Registry...)
		}
		add(p.Other...)
	}
	return out
}

// Allows reports whether an enforced allowlist lets the command reach
// host:port by name (the proxy still guards the address it resolves to).
func (e *Egress) Allows(host string, port int) bool {
	return slices.ContainsFunc(e.Effective(), func(h HostPort) bool { return h.Match(host, port) })
}
