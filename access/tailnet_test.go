package access

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode"

	"tailscale.com/client/tailscale/apitype"
	"tailscale.com/tailcfg"

	"coily.dev/coily/refusal"
)

func TestLookupTailnet(t *testing.T) {
	login := &tailcfg.UserProfile{LoginName: "alice@example.com"}
	caps := func(vals ...string) tailcfg.PeerCapMap {
		var raw []tailcfg.RawMessage
		for _, v := range vals {
			raw = append(raw, tailcfg.RawMessage(v))
		}
		return tailcfg.PeerCapMap{AppCapability: raw}
	}
	tests := []struct {
		name      string
		remote    string
		who       *apitype.WhoIsResponse
		err       error
		principal string
		aliases   []string
		roles     []string
		commands  []string
		code      refusal.Code
	}{
		{name: "user", remote: "100.64.0.7:4242", who: &apitype.WhoIsResponse{Node: &tailcfg.Node{Name: "laptop.ts.net."}, UserProfile: login},
			principal: "alice@example.com"},
		{name: "tags sorted, first is the principal", remote: "100.64.0.8:1", who: &apitype.WhoIsResponse{
			Node: &tailcfg.Node{Name: "ci.", Tags: []string{"tag:zeta", "tag:agent"}}, UserProfile: login},
			principal: "tag:agent", aliases: []string{"tag:zeta"}},
		{name: "capability roles and commands", remote: "[fd7a:115c:a1e0::9]:1", who: &apitype.WhoIsResponse{
			Node:   &tailcfg.Node{Name: "n.", Tags: []string{"tag:x"}},
			CapMap: caps(`{"roles":["agent"]}`, `{"commands":["gh-issue-create"]}`)},
			principal: "tag:x", roles: []string{"agent"}, commands: []string{"gh-issue-create"}},
		{name: "a malformed value voids the capability", remote: "[fd7a:115c:a1e0::9]:1", who: &apitype.WhoIsResponse{
			Node:   &tailcfg.Node{Name: "n.", Tags: []string{"tag:x"}},
			CapMap: caps(`{"roles":["agent"]}`, `not json`, `{"commands":["gh-issue-create"]}`)},
			principal: "tag:x"},
		// Names that collide with coily's reserved principal forms, or
		// would forge lines, are no identity.
		{name: "login that looks like a tag", remote: "100.64.0.13:1", who: &apitype.WhoIsResponse{
			Node: &tailcfg.Node{Name: "x."}, UserProfile: &tailcfg.UserProfile{LoginName: "tag:owner"}}, code: refusal.Unauthenticated},
		{name: "login that looks like a local operator", remote: "100.64.0.13:1", who: &apitype.WhoIsResponse{
			Node: &tailcfg.Node{Name: "x."}, UserProfile: &tailcfg.UserProfile{LoginName: "local:root"}}, code: refusal.Unauthenticated},
		{name: "login that looks like a sandbox, any case", remote: "100.64.0.13:1", who: &apitype.WhoIsResponse{
			Node: &tailcfg.Node{Name: "x."}, UserProfile: &tailcfg.UserProfile{LoginName: "SandBox:demo"}}, code: refusal.Unauthenticated},
		{name: "login that is the server itself", remote: "100.64.0.13:1", who: &apitype.WhoIsResponse{
			Node: &tailcfg.Node{Name: "x."}, UserProfile: &tailcfg.UserProfile{LoginName: "coily"}}, code: refusal.Unauthenticated},
		{name: "login with a newline", remote: "100.64.0.13:1", who: &apitype.WhoIsResponse{
			Node: &tailcfg.Node{Name: "x."}, UserProfile: &tailcfg.UserProfile{LoginName: "eve@x\nlocal:root"}}, code: refusal.Unauthenticated},
		{name: "tag that is not a tag", remote: "100.64.0.13:1", who: &apitype.WhoIsResponse{
			Node: &tailcfg.Node{Name: "x.", Tags: []string{"tag:a", "local:root"}}}, code: refusal.Unauthenticated},
		{name: "empty tag", remote: "100.64.0.13:1", who: &apitype.WhoIsResponse{
			Node: &tailcfg.Node{Name: "x.", Tags: []string{"tag:"}}}, code: refusal.Unauthenticated},
		{name: "ChromeOS VM range is not the tailnet", remote: "100.115.92.5:1", who: &apitype.WhoIsResponse{
			Node: &tailcfg.Node{Name: "x."}, UserProfile: login}, code: refusal.Unauthenticated},
		{name: "funnel ingress", remote: "100.64.0.9:1", who: &apitype.WhoIsResponse{
			Node: &tailcfg.Node{Name: "ingress.", UnsignedPeerAPIOnly: true}, UserProfile: login}, code: refusal.Unauthenticated},
		{name: "not a tailnet address", remote: "192.0.2.1:443", who: &apitype.WhoIsResponse{Node: &tailcfg.Node{}, UserProfile: login},
			code: refusal.Unauthenticated},
		{name: "loopback", remote: "127.0.0.1:443", code: refusal.Unauthenticated},
		{name: "whois fails", remote: "100.64.0.10:1", err: errors.New("no such peer"), code: refusal.Unauthenticated},
		{name: "no node", remote: "100.64.0.11:1", who: &apitype.WhoIsResponse{}, code: refusal.Unauthenticated},
		{name: "neither tags nor user", remote: "100.64.0.12:1", who: &apitype.WhoIsResponse{Node: &tailcfg.Node{Name: "x."}},
			code: refusal.Unauthenticated},
		{name: "garbage address", remote: "not-an-address", code: refusal.Unauthenticated},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newTestGate(t, tablePolicy)
			s.cfg.WhoIs = func(context.Context, string) (*apitype.WhoIsResponse, error) { return tt.who, tt.err }
			c, err := s.Tailnet(context.Background(), tt.remote)
			if tt.code != "" {
				if refusal.As(err).Code != tt.code || c.Principal != "" {
					t.Fatalf("caller %+v err %v, want %s", c, err, tt.code)
				}
				return
			}
			if err != nil || c.Principal != tt.principal || c.Transport != TransportTailnet ||
				!slices.Equal(c.Aliases, tt.aliases) || len(c.Roles) > 0 || !slices.Equal(c.CapRoles, tt.roles) || !slices.Equal(c.Commands, tt.commands) {
				t.Fatalf("caller %+v err %v", c, err)
			}
		})
	}
}

// Identities are reused within WhoIsCacheTTL and looked up again after.
func TestWhoIsCacheBound(t *testing.T) {
	s := newTestGate(t, tablePolicy)
	now := time.Unix(1_800_000_000, 0)
	s.cfg.Now = func() time.Time { return now }
	calls := 0
	tags := []string{"tag:agent"}
	s.cfg.WhoIs = func(context.Context, string) (*apitype.WhoIsResponse, error) {
		calls++
		return &apitype.WhoIsResponse{Node: &tailcfg.Node{Name: "n.", Tags: slices.Clone(tags)}}, nil
	}
	ctx := context.Background()
	c1, _ := s.Tailnet(ctx, "100.64.0.5:9")
	tags = []string{"tag:stranger"} // the tag changes on the control plane
	now = now.Add(WhoIsCacheTTL - time.Millisecond)
	c2, _ := s.Tailnet(ctx, "100.64.0.5:9")
	now = now.Add(2 * time.Millisecond)
	c3, _ := s.Tailnet(ctx, "100.64.0.5:9")
	if calls != 2 || c1.Principal != "tag:agent" || c2.Principal != "tag:agent" || c3.Principal != "tag:stranger" {
		t.Fatalf("calls %d, principals %s %s %s", calls, c1.Principal, c2.Principal, c3.Principal)
	}
}

// FuzzTailnetIdentity: whatever a WhoIs answers (tags, login, the app
// capability's values) and whatever the remote address, an identity
// accepted is a tag or a login that is no reserved principal form and
// holds no control character or space; nothing panics.
func FuzzTailnetIdentity(f *testing.F) {
	f.Add("100.64.0.7:4242", "alice@example.com", "", "", `{"roles":["agent"]}`)
	f.Add("100.64.0.8:1", "", "tag:zeta", "tag:agent", `{"commands":["gh-issue-create"]}`)
	f.Add("[fd7a:115c:a1e0::9]:1", "", "tag:x", "", `not json`)
	f.Add("100.64.0.13:1", "tag:owner", "", "", "")
	f.Add("100.64.0.13:1", "local:root", "", "", "")
	f.Add("100.64.0.13:1", "SandBox:demo", "", "", "")
	f.Add("100.64.0.13:1", "coily", "", "", "")
	f.Add("100.64.0.13:1", "eve@x\nlocal:root", "", "", "")
	f.Add("100.64.0.13:1", "", "tag:a", "local:root", "")
	f.Add("100.64.0.13:1", "", "tag:", "", "")
	f.Add("100.115.92.5:1", "alice@example.com", "", "", "")
	f.Add("192.0.2.1:443", "alice@example.com", "", "", "")
	f.Add("not-an-address", "", "", "", "")
	f.Fuzz(func(t *testing.T, remote, login, tag1, tag2, capValue string) {
		var tags []string
		for _, tag := range []string{tag1, tag2} {
			if tag != "" {
				tags = append(tags, tag)
			}
		}
		w := &apitype.WhoIsResponse{Node: &tailcfg.Node{Name: "n.", Tags: tags},
			CapMap: tailcfg.PeerCapMap{AppCapability: []tailcfg.RawMessage{tailcfg.RawMessage(capValue)}}}
		if login != "" {
			w.UserProfile = &tailcfg.UserProfile{LoginName: login}
		}
		g := New(Config{Log: slog.New(slog.DiscardHandler), WhoIs: func(context.Context, string) (*apitype.WhoIsResponse, error) { return w, nil }})
		c, err := g.Tailnet(context.Background(), remote)
		if err != nil {
			if c.Principal != "" || refusal.As(err).Code != refusal.Unauthenticated {
				t.Fatalf("refused %+v with %v", c, err)
			}
			return
		}
		if len(c.Roles) > 0 {
			t.Fatalf("a tailnet caller got transport roles: %+v", c)
		}
		for _, name := range append([]string{c.Principal}, c.Aliases...) {
			lower := strings.ToLower(name)
			switch {
			case strings.ContainsFunc(name, func(r rune) bool { return r <= ' ' || unicode.IsSpace(r) || unicode.IsControl(r) }):
				t.Fatalf("name %q holds a control character or space", name)
			case len(tags) > 0 && (!strings.HasPrefix(name, "tag:") || name == "tag:"):
				t.Fatalf("tagged node named %q", name)
			case len(tags) == 0 && (lower == ServerCaller.Principal || strings.HasPrefix(lower, "local:") ||
				strings.HasPrefix(lower, "sandbox:") || strings.HasPrefix(lower, "tag:")):
				t.Fatalf("login %q takes a reserved form", name)
			}
		}
	})
}
