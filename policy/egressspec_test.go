package policy_test

import (
	"encoding/json"
	"errors"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"coily.dev/coily/egress"
	"coily.dev/coily/policy"
)

// egressSpecCases are egress blocks as flags give them; field and err name
// the field a bad one must be refused for and part of the message.
var egressSpecCases = []struct {
	spec       policy.EgressSpec
	field, err string
}{
	{policy.EgressSpec{}, "", ""},
	{policy.EgressSpec{Mode: "observe"}, "", ""},
	{policy.EgressSpec{Mode: "enforce", Allow: []string{"API.github.com:443", "*.corp.example.com"},
		Presets: []string{"npm", "github"}, CIDRs: []string{"127.0.0.1/32", "fd00:1::/64"}}, "", ""},
	{policy.EgressSpec{Mode: "Enforce"}, "mode", "enforce or observe"},
	{policy.EgressSpec{Mode: "observe\x1b[2A"}, "mode", "enforce or observe"},
	{policy.EgressSpec{Allow: []string{"ok.example", "10.0.0.1"}}, "allow", "allow_cidrs"},
	{policy.EgressSpec{Allow: []string{"*"}}, "allow", "wildcard"},
	{policy.EgressSpec{Allow: []string{"evil.example\n:443"}}, "allow", ""},
	{policy.EgressSpec{Allow: []string{"example.com:0"}}, "allow", "port"},
	{policy.EgressSpec{Presets: []string{"leftpad"}}, "presets", "unknown egress preset"},
	{policy.EgressSpec{Presets: []string{"NPM"}}, "presets", "unknown egress preset"},
	{policy.EgressSpec{CIDRs: []string{"10.0.0.1/8"}}, "allow_cidrs", "host bits"},
	{policy.EgressSpec{CIDRs: []string{"127.0.0.1"}}, "allow_cidrs", "not a CIDR"},
	{policy.EgressSpec{CIDRs: []string{"0.0.0.0/0\x00"}}, "allow_cidrs", "not a CIDR"},
}

func TestParseEgress(t *testing.T) {
	for _, c := range egressSpecCases {
		e, err := policy.ParseEgress(c.spec)
		var se *policy.EgressSpecError
		switch {
		case c.field == "" && err != nil:
			t.Errorf("ParseEgress(%+v): %v", c.spec, err)
		case c.field != "" && (!errors.As(err, &se) || se.Field != c.field || !strings.Contains(err.Error(), c.err)):
			t.Errorf("ParseEgress(%+v) = %+v, %v; want an error in %s with %q", c.spec, e, err, c.field, c.err)
		}
		// Flags and a policy file read the same block the same way.
		if rule, perr := loadEgressBlock(c.spec); (perr == nil) != (err == nil) || err == nil && !reflect.DeepEqual(e, rule) {
			t.Errorf("ParseEgress(%+v) = %+v, %v; the same block in a policy: %+v, %v", c.spec, e, err, rule, perr)
		}
	}
	e, err := policy.ParseEgress(egressSpecCases[2].spec)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		host string
		port int
		want bool
	}{{"api.github.com", 443, true}, {"registry.npmjs.org", 443, true}, {"x.corp.example.com", 80, true},
		{"codeload.github.com", 443, true}, {"corp.example.com", 443, false}, {"example.com", 443, false}} {
		if got := e.Allows(c.host, c.port); got != c.want {
			t.Errorf("Allows(%q, %d) = %v, want %v", c.host, c.port, got, c.want)
		}
	}
}

// loadEgressBlock writes spec as a rule's egress block in a policy file
// and returns what the policy loader makes of it.
func loadEgressBlock(spec policy.EgressSpec) (*policy.Egress, error) {
	block := map[string]any{}
	if spec.Mode != "" {
		block["mode"] = spec.Mode
	}
	for key, vals := range map[string][]string{"allow": spec.Allow, "presets": spec.Presets, "allow_cidrs": spec.CIDRs} {
		if vals != nil {
			block[key] = vals
		}
	}
	j, err := json.Marshal(block) // JSON is YAML: a flow mapping, every value quoted
	if err != nil {
		return nil, err
	}
	doc := "version: 1\ncommands:\n  - {name: r, binary: /usr/bin/curl, args: [\"**\"], network: proxied, egress: " + string(j) + "}\n"
	p, err := policy.Parse("flags.yaml", []byte(doc))
	if err != nil {
		return nil, err
	}
	i := slices.IndexFunc(p.Rules(), func(r *policy.Rule) bool { return r.Name == "r" })
	if i < 0 {
		return nil, errors.New("no rule r")
	}
	return p.Rules()[i].Egress, nil
}

// FuzzParseEgress holds flags and policy files to one reading: the same
// values are accepted or refused alike, and accepted ones give the same
// Egress.
func FuzzParseEgress(f *testing.F) {
	for _, c := range egressSpecCases {
		f.Add(c.spec.Mode, strings.Join(c.spec.Allow, ","), strings.Join(c.spec.Presets, ","), strings.Join(c.spec.CIDRs, ","))
	}
	f.Fuzz(func(t *testing.T, mode, allow, presets, cidrs string) {
		split := func(s string) []string {
			if s == "" {
				return nil
			}
			return strings.Split(s, ",")
		}
		spec := policy.EgressSpec{Mode: mode, Allow: split(allow), Presets: split(presets), CIDRs: split(cidrs)}
		for _, s := range []string{mode, allow, presets, cidrs} {
			if !utf8.ValidString(s) {
				return // JSON (so the YAML written) would not carry it as it is
			}
		}
		e, err := policy.ParseEgress(spec)
		rule, perr := loadEgressBlock(spec)
		if (err == nil) != (perr == nil) || err == nil && !reflect.DeepEqual(e, rule) {
			t.Fatalf("ParseEgress(%+v) = %+v, %v; the same block in a policy: %+v, %v", spec, e, err, rule, perr)
		}
		var se *policy.EgressSpecError
		if err != nil && !errors.As(err, &se) {
			t.Fatalf("ParseEgress(%+v): %v is not an EgressSpecError", spec, err)
		}
	})
}

// The proxy enforces what the block says: its own entries, its presets'
// hosts, its CIDRs and its mode; no block allows nothing.
func TestEgressProxyAllowlist(t *testing.T) {
	e, err := policy.ParseEgress(policy.EgressSpec{Mode: "observe", Allow: []string{"*.corp.example:8443"},
		Presets: []string{"github"}, CIDRs: []string{"127.0.0.1/32"}})
	if err != nil {
		t.Fatal(err)
	}
	allow, mode, err := e.ProxyAllowlist()
	if err != nil || mode != egress.Observe {
		t.Fatalf("ProxyAllowlist: mode %v, %v", mode, err)
	}
	for _, c := range []struct {
		host string
		port int
		want bool
	}{{"x.corp.example", 8443, true}, {"corp.example", 8443, false}, {"x.corp.example", 443, false},
		{"api.github.com", 443, true}, {"github.com", 22, true}, {"registry.npmjs.org", 443, false}} {
		if got := allow.AllowsHost(c.host, c.port, 443); got != c.want {
			t.Errorf("AllowsHost(%q, %d) = %v, want %v", c.host, c.port, got, c.want)
		}
	}
	if !allow.AllowsAddr(netip.MustParseAddr("127.0.0.1"), 22) || allow.AllowsAddr(netip.MustParseAddr("127.0.0.2"), 22) {
		t.Error("the CIDR 127.0.0.1/32 is not what the proxy allows")
	}
	var none *policy.Egress
	allow, mode, err = none.ProxyAllowlist()
	if err != nil || mode != egress.Enforce || len(allow.Entries) != 0 || len(allow.AllowCIDRs) != 0 {
		t.Fatalf("no egress block: %+v, %v, %v; want an empty enforced allowlist", allow, mode, err)
	}
}
