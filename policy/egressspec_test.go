package policy_test

import (
	"encoding/json"
	"errors"
	"fmt"
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

// injectPresetCases are --egress-inject-preset values beside an
// allowlist: the injections they give (as `injects` prints them), or the
// part of the error that refuses them.
var injectPresetCases = []struct {
	allow, presets []string
	spec           string
	inject         []string
	err            string
}{
	{nil, []string{"github"}, "gh", []string{"GH_TOKEN@api.github.com:token", "GH_TOKEN@api.github.com:bearer", "GH_TOKEN@github.com:basic",
		"GH_TOKEN@uploads.github.com:token", "GH_TOKEN@uploads.github.com:bearer"}, ""},
	{[]string{"ghe.example.com:8443"}, nil, "GH_ENTERPRISE_TOKEN=gh@ghe.example.com:8443", []string{"GH_ENTERPRISE_TOKEN@ghe.example.com:8443/api/:token",
		"GH_ENTERPRISE_TOKEN@ghe.example.com:8443/api/:bearer", "GH_ENTERPRISE_TOKEN@ghe.example.com:8443:basic"}, ""},
	{[]string{"git.example.com"}, nil, "git-https@git.example.com/alice/", []string{"GIT_TOKEN@git.example.com/alice/:basic"}, ""},
	{nil, []string{"npm"}, "MY_NPM=npm", []string{"MY_NPM@registry.npmjs.org:bearer"}, ""},
	{[]string{"idx.example.com"}, nil, "pip@idx.example.com/simple/", []string{"PIP_PASSWORD@idx.example.com/simple/:basic"}, ""},
	{nil, []string{"github"}, "", nil, `unknown preset ""`},
	{nil, []string{"github"}, "GH", nil, "unknown preset"},
	{nil, []string{"github"}, "gh\x1b[2A", nil, "unknown preset"},
	{nil, []string{"github"}, "=gh", nil, "names no variable"},
	{nil, []string{"github"}, "GH_TOKEN=", nil, `unknown preset ""`},
	{nil, []string{"github"}, "gh@", nil, "names no host"},
	{nil, []string{"github"}, "gh@/api/", nil, "names no host"},
	{nil, nil, "gh", nil, `"api.github.com" is not in the rule's egress allowlist`},
	{[]string{"ghe.example.com"}, nil, "gh@ghe.example.com:8443", nil, "ghe.example.com:8443 is not in the egress allowlist"},
	{nil, []string{"github"}, "gh@api.github.com/repos/", nil, "fixed paths"},
	{nil, []string{"github"}, "HTTPS_PROXY=gh", nil, "set by the server"},
	{nil, []string{"github"}, "COILY_INJECT_X=gh", nil, "set by the server"},
	{nil, []string{"github"}, "GH TOKEN=gh", nil, "bad variable name"},
	{nil, []string{"github"}, "A=B=gh", nil, "unknown preset"},
	{[]string{"git.example.com"}, nil, "git-https", nil, "needs host"},
	{[]string{"git.example.com"}, nil, "git-https@git.example.com@evil.example", nil, "git.example.com@evil.example"},
	{[]string{"*.example.com"}, nil, "git-https@*.example.com", nil, "wildcard"},
	{[]string{"git.example.com"}, nil, "git-https@git.example.com:0", nil, "port"},
	{[]string{"git.example.com"}, nil, "git-https@git.example.com/a/../b/", nil, "dot segment"},
	{[]string{"git.example.com"}, nil, "git-https@git.example.com/%2e%2e/", nil, "path"},
	{[]string{"git.example.com"}, nil, "git-https@git.example.com/a?t=1", nil, "path"},
}

// TestParseEgressInjectPreset: --egress-inject-preset gives the
// injections the same entry gives in a policy, and refuses what is bad
// with an EgressSpecError of its field.
func TestParseEgressInjectPreset(t *testing.T) {
	for _, c := range injectPresetCases {
		e, err := policy.ParseEgress(policy.EgressSpec{Allow: c.allow, Presets: c.presets, InjectPresets: []string{c.spec}})
		var se *policy.EgressSpecError
		switch {
		case c.err == "" && err != nil:
			t.Errorf("%q: %v", c.spec, err)
			continue
		case c.err != "" && (!errors.As(err, &se) || se.Field != "inject_preset" || !strings.Contains(err.Error(), c.err)):
			t.Errorf("%q: %v; want an inject_preset error with %q", c.spec, err, c.err)
			continue
		case err != nil:
			continue
		}
		if got := injects(e); !slices.Equal(got, c.inject) {
			t.Errorf("%q: inject %q, want %q", c.spec, got, c.inject)
		}
		checkPresetLikePolicy(t, c.allow, c.presets, c.spec, e)
	}
	// Beside --egress-inspect of one of its hosts and a plain --egress-inject.
	e, err := policy.ParseEgress(policy.EgressSpec{Presets: []string{"github"}, Inspect: []string{"api.github.com"},
		Inject: []string{"GH_TOKEN@api.github.com/repos/:bearer"}, InjectPresets: []string{"gh"}})
	if err != nil || len(e.Inject) != 6 || !slices.Equal(e.Inspect, []string{"api.github.com", "github.com", "uploads.github.com"}) {
		t.Errorf("preset beside inspect and inject: %v %+v", err, e)
	}
}

// checkPresetLikePolicy fails t unless the policy entry that spec stands
// for gives e's injections and inspected hosts.
func checkPresetLikePolicy(t *testing.T, allow, presets []string, spec string, e *policy.Egress) {
	t.Helper()
	preset, env, host, path, err := policy.ParseInjectPresetSpec(spec)
	if err != nil {
		t.Fatalf("%q: %v", spec, err)
	}
	rule, perr := loadInspect(t, presetBlock(allow, presets, nil, "preset", preset, "env", env, "host", host, "path", path), "")
	if perr != nil || !slices.Equal(injects(rule), injects(e)) || !slices.Equal(rule.Inspect, e.Inspect) {
		t.Fatalf("%q: flags give %q %q; the same entry in a policy: %v %+v", spec, injects(e), e.Inspect, perr, rule)
	}
}

// FuzzParseInjectPresetSpec: a --egress-inject-preset value is refused
// or means what the same entry means in a policy.
func FuzzParseInjectPresetSpec(f *testing.F) {
	for _, c := range injectPresetCases {
		f.Add(strings.Join(c.allow, ","), strings.Join(c.presets, ","), c.spec)
	}
	f.Fuzz(func(t *testing.T, allow, presets, spec string) {
		for _, s := range []string{allow, presets, spec} {
			if !utf8.ValidString(s) {
				return // JSON (so the YAML written) would not carry it as it is
			}
		}
		split := func(s string) []string {
			if s == "" {
				return nil
			}
			return strings.Split(s, ",")
		}
		e, err := policy.ParseEgress(policy.EgressSpec{Allow: split(allow), Presets: split(presets), InjectPresets: []string{spec}})
		if err != nil {
			var se *policy.EgressSpecError
			if !errors.As(err, &se) {
				t.Fatalf("%q: %v is not an EgressSpecError", spec, err)
			}
			return
		}
		for _, in := range e.Inject {
			if policy.ReservedEnv(in.Env) || hasDotSegment(in.Path) || !slices.Contains(e.Inspect, in.Host) || !e.Allows(in.Host, max(in.Port, 443)) && !e.Allows(in.Host, in.Port) {
				t.Fatalf("%q: inject %+v", spec, in)
			}
		}
		checkPresetLikePolicy(t, split(allow), split(presets), spec, e)
	})
}

// TestParseEgressHosts: --egress-host NAME=IP pins a name as `hosts`
// does, and refuses what `hosts` refuses.
func TestParseEgressHosts(t *testing.T) {
	e, err := policy.ParseEgress(policy.EgressSpec{Hosts: []string{"GHE.example.test=127.0.0.1", "ghe.example.test=::ffff:10.0.0.1", "x.test=fd00::1"}})
	if err != nil || !slices.Equal(e.Hosts["ghe.example.test"], []netip.Addr{netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("10.0.0.1")}) ||
		len(e.Hosts["x.test"]) != 1 {
		t.Fatalf("%v %+v", err, e)
	}
	many := make([]string, 17)
	for i := range many {
		many[i] = fmt.Sprintf("h.test=10.0.0.%d", i)
	}
	for _, c := range []struct {
		hosts []string
		err   string
	}{
		{[]string{"h.test"}, "NAME=IP"},
		{[]string{"h.test="}, "not an IP address"},
		{[]string{"=127.0.0.1"}, ""},
		{[]string{"*.h.test=127.0.0.1"}, "without wildcard or port"},
		{[]string{"h.test:443=127.0.0.1"}, "without wildcard or port"},
		{[]string{"h.test=fe80::1%eth0"}, "no zone"},
		{[]string{"h.test=127.0.0.1/32"}, "not an IP address"},
		{[]string{"h.test\n=127.0.0.1"}, ""},
		{[]string{"10.0.0.1=127.0.0.1"}, ""},
		{many, "1 to 16 addresses"},
	} {
		_, err := policy.ParseEgress(policy.EgressSpec{Hosts: c.hosts})
		var se *policy.EgressSpecError
		if !errors.As(err, &se) || se.Field != "hosts" || !strings.Contains(err.Error(), c.err) {
			t.Errorf("%q: %v; want a hosts error with %q", c.hosts, err, c.err)
		}
	}
}

// FuzzParseEgressHosts: an accepted --egress-host pins one exact,
// lower-case name to addresses without zones, never a wildcard.
func FuzzParseEgressHosts(f *testing.F) {
	for _, s := range []string{"GHE.example.test=127.0.0.1", "h.test=", "*.h.test=127.0.0.1", "h.test:443=127.0.0.1", "h.test=fe80::1%eth0", "h.test\n=127.0.0.1", "=::1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		e, err := policy.ParseEgress(policy.EgressSpec{Hosts: []string{s}})
		if err != nil {
			return
		}
		for name, addrs := range e.Hosts {
			hp, perr := policy.ParseHostPort(name)
			if perr != nil || hp.Suffix || hp.Port != 0 || hp.Host != name || len(addrs) != 1 || addrs[0].Zone() != "" || !addrs[0].IsValid() {
				t.Fatalf("%q pinned %q to %v", s, name, addrs)
			}
		}
	})
}
