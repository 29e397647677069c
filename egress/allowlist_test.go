package egress

import (
	"net/netip"
	"strings"
	"testing"
)

var entryCases = []struct {
	in   string
	want Entry
	err  bool
}{
	{in: "api.github.com", want: Entry{Host: "api.github.com"}},
	{in: "API.GitHub.COM.", want: Entry{Host: "api.github.com"}},
	{in: "*.github.com", want: Entry{Host: "github.com", Suffix: true}},
	{in: "*.github.com:8443", want: Entry{Host: "github.com", Suffix: true, Port: 8443}},
	{in: "registry.npmjs.org:443", want: Entry{Host: "registry.npmjs.org", Port: 443}},
	{in: "my_host.internal", want: Entry{Host: "my_host.internal"}},
	{in: "", err: true},
	{in: "*", err: true},
	{in: "*.", err: true},
	{in: "*.com", err: true},
	{in: "**.x", err: true},
	{in: "*.*.x.com", err: true},
	{in: "a.*.com", err: true},
	{in: "github.com:0", err: true},
	{in: "github.com:65536", err: true},
	{in: "github.com:https", err: true},
	{in: "github.com:", err: true},
	{in: "github.com:+443", err: true},
	{in: "github.com:-1", err: true},
	{in: ":443", err: true},
	{in: "1.2.3.4", err: true},
	{in: "1.2.3.4:443", err: true},
	{in: "::1", err: true},
	{in: "[::1]:443", err: true},
	{in: "2001:db8::1", err: true},
	{in: "1.2.3", err: true},
	{in: "gith\x00ub.com", err: true},
	{in: "github.com\n", err: true},
	{in: "git hub.com", err: true},
	{in: "user@github.com", err: true},
	{in: "github.com/path", err: true},
	{in: "-a.com", err: true},
	{in: "a-.com", err: true},
	{in: "a..com", err: true},
	{in: ".com", err: true},
	{in: "ex\u00e4mple.com", err: true},
	{in: strings.Repeat("a", 64) + ".com", err: true},
	{in: strings.Repeat("a.", 130) + "com", err: true},
}

func TestParseEntry(t *testing.T) {
	for _, tc := range entryCases {
		got, err := ParseEntry(tc.in)
		if tc.err {
			if err == nil {
				t.Errorf("ParseEntry(%q) = %+v, want an error", tc.in, got)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ParseEntry(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
	}
}

func FuzzParseEntry(f *testing.F) {
	for _, tc := range entryCases {
		f.Add(tc.in)
	}
	f.Fuzz(func(t *testing.T, s string) {
		e, err := ParseEntry(s)
		if err != nil {
			return
		}
		// What parses round-trips, and is a clean DNS name.
		again, err := ParseEntry(e.String())
		if err != nil || again != e {
			t.Fatalf("%q -> %+v -> %q -> %+v, %v", s, e, e.String(), again, err)
		}
		if strings.ContainsAny(e.Host, "*:@/ \x00") || e.Host != strings.ToLower(e.Host) {
			t.Fatalf("%q: host %q is not normalized", s, e.Host)
		}
	})
}

func TestAllowsHost(t *testing.T) {
	a, err := NewAllowlist([]string{"api.github.com", "*.githubusercontent.com", "ssh.example.org:22"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		host              string
		port, defaultPort int
		want              bool
	}{
		{"api.github.com", 443, 443, true},
		{"api.github.com", 80, 80, true},     // no port: the kind's default
		{"api.github.com", 8443, 443, false}, // port mismatch
		{"api.github.com", 443, 80, false},   // 443 over plain HTTP is not the default
		{"github.com", 443, 443, false},
		{"xapi.github.com", 443, 443, false},
		{"raw.githubusercontent.com", 443, 443, true},
		{"a.b.githubusercontent.com", 443, 443, true},
		{"githubusercontent.com", 443, 443, false}, // suffix does not match the apex
		{"evilgithubusercontent.com", 443, 443, false},
		{"ssh.example.org", 22, 443, true},
		{"ssh.example.org", 443, 443, false},
	}
	for _, tc := range cases {
		if got := a.AllowsHost(tc.host, tc.port, tc.defaultPort); got != tc.want {
			t.Errorf("AllowsHost(%q, %d, %d) = %v, want %v", tc.host, tc.port, tc.defaultPort, got, tc.want)
		}
	}
	var none *Allowlist
	if none.AllowsHost("api.github.com", 443, 443) || none.AllowsAddr(netip.MustParseAddr("1.1.1.1"), 443) {
		t.Error("a nil allowlist allows something")
	}
}

func TestAllowsAddr(t *testing.T) {
	a, err := NewAllowlist(nil, anyPort("127.0.0.1/8", "fd00::/8"))
	if err != nil {
		t.Fatal(err)
	}
	for s, want := range map[string]bool{
		"127.0.0.1": true, "127.255.0.9": true, "::ffff:127.0.0.1": true, "fd12::1": true,
		"128.0.0.1": false, "::1": false, "10.0.0.1": false,
	} {
		if got := a.AllowsAddr(netip.MustParseAddr(s), 22); got != want {
			t.Errorf("AllowsAddr(%s) = %v, want %v", s, got, want)
		}
	}
	if _, err := NewAllowlist([]string{"*"}, nil); err == nil {
		t.Error("NewAllowlist accepted *")
	}
}
