package policy_test

import (
	"coily.dev/coily/egress"
	"net/netip"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	"coily.dev/coily/policy"
)

// hostPortCases are allowlist entries, good and hostile; err is part of
// the error a hostile one must give.
var hostPortCases = []struct {
	in   string
	want policy.HostPort
	err  string
}{
	{"example.com", policy.HostPort{Host: "example.com"}, ""},
	{"Example.COM:8443", policy.HostPort{Host: "example.com", Port: 8443}, ""},
	{"*.example.com", policy.HostPort{Host: "example.com", Suffix: true}, ""},
	{"*.a-b.example.com:1", policy.HostPort{Host: "a-b.example.com", Port: 1, Suffix: true}, ""},
	{"localhost:65535", policy.HostPort{Host: "localhost", Port: 65535}, ""},
	{"xn--bcher-kva.example", policy.HostPort{Host: "xn--bcher-kva.example"}, ""},
	{"", policy.HostPort{}, "empty host"},
	{":443", policy.HostPort{}, "empty host"},
	{"example.com:", policy.HostPort{}, "port"},
	{"example.com:0", policy.HostPort{}, "port"},
	{"example.com:65536", policy.HostPort{}, "port"},
	{"example.com:-1", policy.HostPort{}, "port"},
	{"example.com:+443", policy.HostPort{}, "port"},
	{"example.com:0443", policy.HostPort{}, "port"},
	{"example.com: 443", policy.HostPort{}, "port"},
	{"example.com:https", policy.HostPort{}, "port"},
	{"*", policy.HostPort{}, "wildcard"},
	{"*:443", policy.HostPort{}, "wildcard"},
	{"*.", policy.HostPort{}, "wildcard"},
	{"**.example.com", policy.HostPort{}, "wildcard"},
	{"*.*.example.com", policy.HostPort{}, "wildcard"},
	{"a.*.example.com", policy.HostPort{}, "wildcard"},
	{"*example.com", policy.HostPort{}, "wildcard"},
	{"*.com", policy.HostPort{}, "two labels"},
	{"10.0.0.1", policy.HostPort{}, "allow_cidrs"},
	{"127.1", policy.HostPort{}, "allow_cidrs"},
	{"2130706433", policy.HostPort{}, "allow_cidrs"},
	{"0x7f000001", policy.HostPort{}, "allow_cidrs"},
	{"::1", policy.HostPort{}, "allow_cidrs"},
	{"[::1]:443", policy.HostPort{}, "allow_cidrs"},
	{"fe80::1%eth0", policy.HostPort{}, "allow_cidrs"},
	{"example.com.", policy.HostPort{}, "dot"},
	{"example..com", policy.HostPort{}, "label"},
	{".example.com", policy.HostPort{}, "label"},
	{"-a.example.com", policy.HostPort{}, "label"},
	{"a-.example.com", policy.HostPort{}, "label"},
	{"a_b.example.com", policy.HostPort{}, "label"},
	{"exa mple.com", policy.HostPort{}, "label"},
	{"bücher.example", policy.HostPort{}, "label"},
	{"user@example.com", policy.HostPort{}, "label"},
	{"example.com/path", policy.HostPort{}, "label"},
	{strings.Repeat("a", 64) + ".com", policy.HostPort{}, "label"},
	{strings.Repeat("a.", 127) + "com", policy.HostPort{}, "253"},
}

func TestParseHostPort(t *testing.T) {
	for _, c := range hostPortCases {
		got, err := policy.ParseHostPort(c.in)
		if c.err == "" {
			if err != nil || got != c.want {
				t.Errorf("ParseHostPort(%q) = %+v, %v; want %+v", c.in, got, err, c.want)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), c.err) {
			t.Errorf("ParseHostPort(%q) = %+v, %v; want an error with %q", c.in, got, err, c.err)
		}
	}
}

func TestHostPortMatch(t *testing.T) {
	exact := policy.HostPort{Host: "example.com"}
	suffix := policy.HostPort{Host: "example.com", Suffix: true, Port: 8443}
	for _, c := range []struct {
		hp   policy.HostPort
		host string
		port int
		want bool
	}{
		{exact, "example.com", 443, true},
		{exact, "EXAMPLE.com.", 80, true},
		{exact, "example.com", 22, false},
		{exact, "www.example.com", 443, false},
		{exact, "badexample.com", 443, false},
		{exact, "example.com.evil", 443, false},
		{suffix, "a.example.com", 8443, true},
		{suffix, "a.b.example.com", 8443, true},
		{suffix, "example.com", 8443, false},
		{suffix, ".example.com", 8443, false},
		{suffix, "badexample.com", 8443, false},
		{suffix, "a.example.com", 443, false},
		{policy.HostPort{Host: "github.com", Port: 22}, "github.com", 22, true},
		{policy.HostPort{Host: "github.com", Port: 22}, "github.com", 443, false},
	} {
		if got := c.hp.Match(c.host, c.port); got != c.want {
			t.Errorf("%s.Match(%q, %d) = %v, want %v", c.hp, c.host, c.port, got, c.want)
		}
	}
}

func TestEgressPresetsTable(t *testing.T) {
	for _, name := range []string{"brew", "npm", "pnpm", "yarn", "bun", "pip", "uv", "pipx", "poetry",
		"cargo", "gem", "bundle", "github", "aws"} {
		hosts := policy.EgressPresetHosts(name)
		if len(hosts) == 0 {
			t.Errorf("preset %q has no hosts", name)
		}
		for _, h := range hosts {
			s := h.Host
			if h.Suffix {
				s = "*." + s
			}
			if back, err := policy.ParseHostPort(h.String()); err != nil || back != h {
				t.Errorf("preset %q: entry %s does not parse back: %+v, %v", name, h, back, err)
			}
			if h.Port != 443 && !(name == "github" && h == (policy.HostPort{Host: "github.com", Port: 22})) {
				t.Errorf("preset %q: entry %s is not on port 443", name, s)
			}
		}
	}
	if got := len(policy.EgressPresets()); got != 14 {
		t.Errorf("EgressPresets() has %d names, want 14: %v", got, policy.EgressPresets())
	}
	if policy.EgressPresetHosts("leftpad") != nil {
		t.Error("an unknown preset has hosts")
	}
}

func TestLoadEgress(t *testing.T) {
	p := load(t, "egress.yaml")
	rule := func(name string) *policy.Rule {
		i := slices.IndexFunc(p.Rules(), func(r *policy.Rule) bool { return r.Name == name })
		if i < 0 {
			t.Fatalf("no rule %q", name)
		}
		return p.Rules()[i]
	}
	npm := rule("npm-install").Egress
	wantNpm := []policy.HostPort{
		{Host: "registry.npmjs.org", Port: 443},
		{Host: "mirror.example.com", Port: 8443},
	}
	if npm.Mode != policy.EgressEnforce || !reflect.DeepEqual(npm.Effective(), wantNpm) {
		t.Errorf("npm-install: mode %q, effective %v; want enforce, %v", npm.Mode, npm.Effective(), wantNpm)
	}
	if npm.MaxConns != 8 || npm.MaxBytes != 512<<20 {
		t.Errorf("npm-install: max_connections %d, max_bytes %d; want 8 and 512 MiB", npm.MaxConns, npm.MaxBytes)
	}
	if npm.Allows("registry.yarnpkg.com", 443) || !npm.Allows("mirror.example.com", 8443) {
		t.Error("the yarn mirror did not replace registry.yarnpkg.com")
	}
	gh := rule("gh").Egress
	wantAllow := []policy.HostPort{{Host: "ghe.example.com"}, {Host: "corp.example.com", Port: 8443, Suffix: true}, {Host: "github.com", Port: 22}}
	if !reflect.DeepEqual(gh.Allow, wantAllow) {
		t.Errorf("gh: allow %v, want %v", gh.Allow, wantAllow)
	}
	if want := []egress.CIDR{{Prefix: netip.MustParsePrefix("10.20.0.0/16")}, {Prefix: netip.MustParsePrefix("fd00:1::/64")},
		{Prefix: netip.MustParsePrefix("127.0.0.1/32"), Lo: 8443, Hi: 8443}, {Prefix: netip.MustParsePrefix("::1/128"), Lo: 8000, Hi: 8099}}; !reflect.DeepEqual(gh.CIDRs, want) {
		t.Errorf("gh: cidrs %v, want %v", gh.CIDRs, want)
	}
	wantHosts := map[string][]netip.Addr{"ghe.example.com": {netip.MustParseAddr("10.20.0.7"), netip.MustParseAddr("10.20.0.8"), netip.MustParseAddr("fd00:1::7")}}
	if !reflect.DeepEqual(gh.Hosts, wantHosts) {
		t.Errorf("gh: hosts %v, want %v (names lower-cased, mapped IPv4 unmapped)", gh.Hosts, wantHosts)
	}
	eff := gh.Effective()
	if n := len(eff); n != len(wantAllow)+len(policy.EgressPresetHosts("github"))-1 {
		t.Errorf("gh: effective %v has a duplicate or misses an entry", eff)
	}
	for _, c := range []struct {
		host string
		port int
		want bool
	}{{"api.github.com", 443, true}, {"raw.githubusercontent.com", 443, true}, {"githubusercontent.com", 443, false},
		{"github.com", 22, true}, {"ghe.example.com", 80, true}, {"x.corp.example.com", 8443, true},
		{"x.corp.example.com", 443, false}, {"registry.npmjs.org", 443, false}, {"10.20.0.1", 443, false}} {
		if got := gh.Allows(c.host, c.port); got != c.want {
			t.Errorf("gh: Allows(%q, %d) = %v, want %v", c.host, c.port, got, c.want)
		}
	}
	if aws := rule("aws").Egress; aws.Mode != policy.EgressObserve || len(aws.Effective()) != 0 {
		t.Errorf("aws: %+v", aws)
	}
	if e := rule("curl-proxied").Egress; e != nil || e.Effective() != nil || e.Allows("example.com", 443) {
		t.Errorf("curl-proxied: egress %+v, want none", e)
	}
}

func FuzzParseHostPort(f *testing.F) {
	for _, c := range hostPortCases {
		f.Add(c.in, 443)
	}
	f.Fuzz(func(t *testing.T, s string, port int) {
		hp, err := policy.ParseHostPort(s)
		if err != nil {
			return
		}
		if hp.Host != strings.ToLower(hp.Host) || strings.ContainsAny(hp.Host, "*:[]/@ ") || strings.HasSuffix(hp.Host, ".") {
			t.Fatalf("ParseHostPort(%q) = %+v", s, hp)
		}
		if _, err := netip.ParseAddr(hp.Host); err == nil {
			t.Fatalf("ParseHostPort(%q) accepted an IP literal", s)
		}
		// One grammar: what the policy accepts, the proxy reads the same.
		if e, err := egress.ParseEntry(s); err != nil || e != (egress.Entry{Host: hp.Host, Suffix: hp.Suffix, Port: hp.Port}) {
			t.Fatalf("ParseHostPort(%q) = %+v, but the proxy reads %+v, %v", s, hp, e, err)
		}
		if back, err := policy.ParseHostPort(hp.String()); err != nil || back != hp {
			t.Fatalf("%+v does not parse back from %q: %+v, %v", hp, hp.String(), back, err)
		}
		if hp.Match(hp.Host, port) == hp.Suffix && (hp.Port == port || hp.Port == 0 && (port == 443 || port == 80)) {
			t.Fatalf("%s.Match(%q, %d) = %v", hp, hp.Host, port, !hp.Suffix)
		}
		if hp.Match("x."+hp.Host, port) != hp.Suffix && (hp.Port == port || hp.Port == 0 && (port == 443 || port == 80)) {
			t.Fatalf("%s.Match(x.%s, %d) = %v", hp, hp.Host, port, !hp.Suffix)
		}
	})
}

// TestExampleEgressRules loads examples/policy.yaml with its commented
// egress rules uncommented: the example the docs point at must load.
func TestExampleEgressRules(t *testing.T) {
	data, err := os.ReadFile("../examples/policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(data), "# --- through the egress proxy")
	if !ok {
		t.Fatal("examples/policy.yaml has no egress example block")
	}
	var lines []string
	for _, l := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(l, "  # - ") || strings.HasPrefix(l, "  #   ") {
			if strings.Contains(block, l) {
				l = "  " + strings.TrimPrefix(l, "  # ")
			}
		}
		lines = append(lines, l)
	}
	p, err := policy.Parse("examples/policy.yaml", []byte(strings.Join(lines, "\n")))
	if err != nil {
		t.Fatalf("the uncommented egress examples do not load: %v", err)
	}
	for name, want := range map[string]string{"gh-issue-list": "api.github.com:443", "npm-install": "registry.npmjs.org:443"} {
		i := slices.IndexFunc(p.Rules(), func(r *policy.Rule) bool { return r.Name == name })
		if i < 0 {
			t.Fatalf("no rule %q once uncommented", name)
		}
		r := p.Rules()[i]
		if r.Network != policy.NetworkProxied || !slices.ContainsFunc(r.Egress.Effective(), func(h policy.HostPort) bool { return h.String() == want }) {
			t.Errorf("rule %q: network %q, effective %v; want proxied with %s", name, r.Network, r.Egress.Effective(), want)
		}
	}
}

// checkEgress asserts what a loaded rule's egress block guarantees: only
// with network proxied, a known mode, entries that parse back as written,
// masked CIDRs, known presets.
func checkEgress(t testing.TB, r *policy.Rule) {
	t.Helper()
	e := r.Egress
	if e == nil {
		return
	}
	if r.Network != policy.NetworkProxied {
		t.Errorf("rule %q: egress with network %q", r.Name, r.Network)
	}
	if e.Mode != policy.EgressEnforce && e.Mode != policy.EgressObserve {
		t.Errorf("rule %q: egress mode %q", r.Name, e.Mode)
	}
	for _, hp := range e.Effective() {
		if back, err := policy.ParseHostPort(hp.String()); err != nil || back != hp {
			t.Errorf("rule %q: effective entry %+v does not parse back: %+v, %v", r.Name, hp, back, err)
		}
	}
	for _, c := range e.CIDRs {
		if !c.Prefix.IsValid() || c.Prefix.Masked() != c.Prefix || c.Lo > c.Hi {
			t.Errorf("rule %q: cidr %v is not masked", r.Name, c)
		}
	}
	for _, name := range e.Presets {
		if policy.EgressPresetHosts(name) == nil {
			t.Errorf("rule %q: unknown preset %q", r.Name, name)
		}
	}
	for _, k := range e.SSHKnownHosts {
		if back, err := policy.ParseKnownHost(k.String()); err != nil || !reflect.DeepEqual(back, k) {
			t.Errorf("rule %q: known host %q does not parse back: %+v, %v", r.Name, k, back, err)
		}
	}
}
