package egress

import (
	"strings"
	"testing"
)

var authorityCases = []struct {
	in          string
	defaultPort int
	want        string // Target.String(), empty for an error
}{
	{"api.github.com:443", 0, "api.github.com:443"},
	{"API.GitHub.com.:443", 0, "api.github.com:443"},
	{"example.com", 80, "example.com:80"},
	{"example.com", 0, ""}, // CONNECT needs a port
	{"127.0.0.1:8080", 0, "127.0.0.1:8080"},
	{"[::1]:443", 0, "[::1]:443"},
	{"[::1]", 80, "[::1]:80"},
	{"[::ffff:127.0.0.1]:443", 0, "[::ffff:127.0.0.1]:443"},
	{"[fe80::1%25eth0]:443", 0, ""},
	{"[fe80::1%eth0]:443", 0, ""},
	{"[127.0.0.1]:443", 0, ""},
	{"[::1:443", 0, ""},
	{"[::1]x:443", 0, ""},
	{"::1:443", 0, ""},
	{"user@example.com:443", 0, ""},
	{"user:pw@example.com:443", 0, ""},
	{":443", 0, ""},
	{"", 80, ""},
	{"example.com:", 0, ""},
	{"example.com:0", 0, ""},
	{"example.com:65536", 0, ""},
	{"example.com:99999999999999999999", 0, ""},
	{"example.com:https", 0, ""},
	{"example.com: 443", 0, ""},
	{"example.com:443/path", 0, ""},
	{"exa\x00mple.com:443", 0, ""},
	{"example.com\r\n:443", 0, ""},
	{"*.example.com:443", 0, ""},
	{"example.com:443:443", 0, ""},
	{strings.Repeat("a", 300) + ":443", 0, ""},
}

func TestParseAuthority(t *testing.T) {
	for _, tc := range authorityCases {
		got, err := ParseAuthority(tc.in, tc.defaultPort)
		switch {
		case tc.want == "" && err == nil:
			t.Errorf("ParseAuthority(%q, %d) = %v, want an error", tc.in, tc.defaultPort, got)
		case tc.want != "" && (err != nil || got.String() != tc.want):
			t.Errorf("ParseAuthority(%q, %d) = %v, %v; want %s", tc.in, tc.defaultPort, got, err, tc.want)
		}
	}
}

func TestParseAbsoluteHTTP(t *testing.T) {
	cases := map[string]string{
		"http://example.com/a?b=c":        "example.com:80",
		"http://example.com:8080/":        "example.com:8080",
		"http://[::1]:8080/":              "[::1]:8080",
		"https://example.com/":            "",
		"ftp://example.com/":              "",
		"http://user:pw@example.com/":     "",
		"http:///path":                    "",
		"/relative":                       "",
		"http://exa mple.com/":            "",
		"http://example.com:0/":           "",
		"http://example.com/\x00":         "",
		"http:example.com":                "",
		"http://example.com%2f.evil.com/": "",
	}
	for in, want := range cases {
		got, _, err := ParseAbsoluteHTTP(in)
		switch {
		case want == "" && err == nil:
			t.Errorf("ParseAbsoluteHTTP(%q) = %v, want an error", in, got)
		case want != "" && (err != nil || got.String() != want):
			t.Errorf("ParseAbsoluteHTTP(%q) = %v, %v; want %s", in, got, err, want)
		}
	}
}

func FuzzParseTarget(f *testing.F) {
	for _, tc := range authorityCases {
		f.Add(tc.in)
		f.Add("http://" + tc.in + "/")
	}
	f.Fuzz(func(t *testing.T, s string) {
		if tg, err := ParseAuthority(s, 0); err == nil {
			if tg.Host == "" || tg.Port < 1 || tg.Port > 65535 {
				t.Fatalf("%q -> %+v", s, tg)
			}
			again, err := ParseAuthority(tg.String(), 0)
			if err != nil || again != tg {
				t.Fatalf("%q -> %v -> %+v, %v", s, tg, again, err)
			}
		}
		if tg, _, err := ParseAbsoluteHTTP(s); err == nil && (tg.Host == "" || tg.Port < 1 || strings.ContainsAny(tg.Host, "@/ ")) {
			t.Fatalf("%q -> %+v", s, tg)
		}
	})
}
