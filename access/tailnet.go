package access

import (
	"context"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode"

	"tailscale.com/client/tailscale/apitype"
	"tailscale.com/net/tsaddr"
	"tailscale.com/tailcfg"

	"coily.dev/coily/refusal"
)

// AppCapability is the tailnet app capability coily reads from WhoIs: a
// list of JSON objects {"roles": [...], "commands": [...]}, granting roles
// and allow-rule names the local policy defines (nothing else).
const AppCapability tailcfg.PeerCapability = "coily.dev/cap/coily"

// WhoIsCacheTTL bounds how long a tailnet identity is reused. A revoked
// grant or a changed tag reaches an open connection within this bound plus
// the time the control plane takes to push the change to this node.
const WhoIsCacheTTL = 2 * time.Second

// WhoIsFunc looks up a tailnet peer by its remote address ("ip:port").
type WhoIsFunc func(ctx context.Context, remoteAddr string) (*apitype.WhoIsResponse, error)

// capGrant is one value of the coily app capability.
type capGrant struct {
	Roles    []string `json:"roles"`
	Commands []string `json:"commands"`
}

type whoisEntry struct {
	caller  Caller
	err     error
	expires time.Time
}

// whoisCache remembers identities per remote address for WhoIsCacheTTL:
// calls on one connection within the bound share one lookup.
type whoisCache struct {
	mu sync.Mutex
	m  map[string]whoisEntry
}

// Tailnet identifies the tailnet peer at remote ("ip:port") by WhoIs: its
// tags when it is tagged (the first, sorted; the others are aliases), else
// its user's login. The coily app capability adds roles and rule names. It
// returns the caller (with Peer filled even on refusal, for the audit) and
// a refusal when the peer cannot be identified.
func (g *Gate) Tailnet(ctx context.Context, remote string) (Caller, error) {
	if g.cfg.WhoIs == nil {
		return Caller{Peer: remote}, refusal.New(refusal.Unauthenticated, "transport does not identify callers")
	}
	now := g.cfg.Now()
	g.whois.mu.Lock()
	e, ok := g.whois.m[remote]
	g.whois.mu.Unlock()
	if ok && now.Before(e.expires) {
		return e.caller, e.err
	}
	c, err := g.lookupTailnet(ctx, remote)
	g.whois.mu.Lock()
	if g.whois.m == nil || len(g.whois.m) > 4096 {
		g.whois.m = map[string]whoisEntry{} // bounded: drop everything rather than grow
	}
	g.whois.m[remote] = whoisEntry{caller: c, err: err, expires: now.Add(WhoIsCacheTTL)}
	g.whois.mu.Unlock()
	return c, err
}

func (g *Gate) lookupTailnet(ctx context.Context, remote string) (Caller, error) {
	c := Caller{Transport: TransportTailnet, Peer: remote}
	ap, err := netip.ParseAddrPort(remote)
	if err != nil || !tailnetAddr(ap.Addr()) {
		return c, refusal.New(refusal.Unauthenticated, "connection is not from a tailnet address")
	}
	w, err := g.cfg.WhoIs(ctx, remote)
	if err != nil || w == nil || w.Node == nil {
		return c, refusal.Wrap(refusal.Unauthenticated, err, "tailnet peer %s could not be identified", remote)
	}
	n := w.Node
	c.Peer = strings.TrimSuffix(n.Name, ".") + " " + remote
	if n.UnsignedPeerAPIOnly {
		return c, refusal.New(refusal.Unauthenticated, "connections through Funnel are refused")
	}
	switch tags := slices.Sorted(slices.Values(n.Tags)); {
	case len(tags) > 0:
		c.Principal, c.Aliases = tags[0], tags[1:]
	case w.UserProfile != nil && w.UserProfile.LoginName != "":
		c.Principal = w.UserProfile.LoginName
	default:
		return c, refusal.New(refusal.Unauthenticated, "tailnet peer %s has neither tags nor a user", remote)
	}
	if err := checkTailnetNames(c.Principal, c.Aliases, len(n.Tags) > 0); err != nil {
		return Caller{Transport: TransportTailnet, Peer: c.Peer}, err
	}
	grants, err := tailcfg.UnmarshalCapJSON[capGrant](w.CapMap, AppCapability)
	if err != nil {
		// One malformed value voids the capability: it grants nothing.
		g.log.Warn("ignoring malformed coily app capability", "peer", c.Peer, "err", err)
		return c, nil
	}
	for _, g := range grants {
		c.CapRoles = append(c.CapRoles, g.Roles...)
		c.Commands = append(c.Commands, g.Commands...)
	}
	return c, nil
}

// tailnetAddr reports whether a is a Tailscale address.
func tailnetAddr(a netip.Addr) bool { return tsaddr.IsTailscaleIP(a) }

// reservedPrefixes are principal forms only coily's own transports make:
// a tailnet name that looks like one would be taken for what it is not.
var reservedPrefixes = []string{"local:", "sandbox:", "tag:"}

// checkTailnetNames refuses tailnet identities that collide with coily's
// reserved principal forms: every tag must be a "tag:" name, and a user's
// login must not look like a tag, a local operator, a sandbox or the
// server itself. Names with control characters or spaces are refused too
// (they would forge audit lines and policy matches).
func checkTailnetNames(principal string, aliases []string, tagged bool) error {
	for _, name := range append([]string{principal}, aliases...) {
		if name == "" || strings.ContainsFunc(name, func(r rune) bool { return r <= ' ' || r == 0x7f || unicode.IsControl(r) || unicode.IsSpace(r) }) {
			return refusal.New(refusal.Unauthenticated, "tailnet identity %q is not a valid name", name)
		}
		lower := strings.ToLower(name)
		if tagged {
			if !strings.HasPrefix(name, "tag:") || len(name) == len("tag:") {
				return refusal.New(refusal.Unauthenticated, "tailnet tag %q is not a tag", name)
			}
			continue
		}
		if lower == ServerCaller.Principal || slices.ContainsFunc(reservedPrefixes, func(p string) bool { return strings.HasPrefix(lower, p) }) {
			return refusal.New(refusal.Unauthenticated, "tailnet login %q collides with a reserved principal form", name)
		}
	}
	return nil
}
