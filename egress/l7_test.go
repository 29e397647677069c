package egress

import (
	"strings"
	"testing"
)

var hostileHTTPRules = []string{
	"", " ", "GET", "GET ", "get /x", "GET x", "GET //x", "GET /a//b", "GET /a/../b", "GET /a/./b", "GET /..",
	"GET /**/a", "GET /a**", "GET /a*b", "GET /%2e%2e", "GET /a?b", "GET /a#b", "GET /a b", "GET /a\x00",
	"GET /a\tb", "GET /é", "G-ET /a", "GETGETGETGETGETGETGET /a", "GET  /a", "* ", "GET /" + strings.Repeat("a", 1100),
}

func TestParseHTTPRuleRefusesHostile(t *testing.T) {
	for _, s := range hostileHTTPRules {
		if r, err := ParseHTTPRule(s); err == nil {
			t.Errorf("ParseHTTPRule(%q) = %+v, want an error", s, r)
		}
	}
}

func TestHTTPRuleMatch(t *testing.T) {
	cases := []struct {
		rule, method, path string
		want               bool
	}{
		{"GET /repos/alice/app/**", "GET", "/repos/alice/app", true},
		{"GET /repos/alice/app/**", "GET", "/repos/alice/app/", true},
		{"GET /repos/alice/app/**", "GET", "/repos/alice/app/issues/1", true},
		{"GET /repos/alice/app/**", "GET", "/repos/alice/appx", false},
		{"GET /repos/alice/app/**", "POST", "/repos/alice/app", false},
		{"GET /repos/alice/app/**", "GET", "/repos/alice/app/../../bob/x", false},
		{"GET /repos/alice/app/**", "GET", "/repos/alice/app/./x", false},
		{"GET /repos/alice/app/**", "GET", "/repos/Alice/app", false},
		{"GET /repos/*/app", "GET", "/repos/bob/app", true},
		{"GET /repos/*/app", "GET", "/repos//app", false},
		{"GET /repos/*/app", "GET", "/repos/bob/app/x", false},
		{"GET /repos/*/app", "GET", "/repos/../app", false},
		{"POST /repos/alice/app/issues", "POST", "/repos/alice/app/issues", true},
		{"POST /repos/alice/app/issues", "POST", "/repos/alice/app/issues/", false},
		{"* /graphql", "POST", "/graphql", true},
		{"GET /", "GET", "/", true},
		{"GET /", "GET", "/x", false},
		{"GET /**", "GET", "/anything/at/all", true},
		{"GET /**", "GET", "x", false},
	}
	for _, tc := range cases {
		r, err := ParseHTTPRule(tc.rule)
		if err != nil {
			t.Fatalf("%q: %v", tc.rule, err)
		}
		if got := r.Allows(tc.method, tc.path); got != tc.want {
			t.Errorf("%q allows %s %s = %v, want %v", tc.rule, tc.method, tc.path, got, tc.want)
		}
	}
}

// FuzzHTTPRule: a rule that parses never lets a dot segment through, and
// matching never panics.
func FuzzHTTPRule(f *testing.F) {
	for _, s := range hostileHTTPRules {
		f.Add(s, "/a/../b")
	}
	for _, p := range hostilePaths {
		f.Add("GET /repos/alice/**", p)
		f.Add("GET /repos/*", p)
	}
	f.Add("GET /repos/alice/app/**", "/repos/alice/app/x")
	f.Add("GET /repos/*/app", "/repos/x/app")
	f.Fuzz(func(t *testing.T, rule, path string) {
		r, err := ParseHTTPRule(rule)
		if err != nil {
			return
		}
		if err := checkPattern(r.Pattern); err != nil {
			t.Fatalf("accepted pattern %q fails its own check: %v", r.Pattern, err)
		}
		if r.Allows("GET", path) || r.Allows(r.Method, path) {
			for _, seg := range strings.Split(path, "/") {
				if seg == "." || seg == ".." {
					t.Fatalf("%q allows %q, which has a dot segment", rule, path)
				}
			}
			if !strings.HasPrefix(path, "/") {
				t.Fatalf("%q allows %q, not absolute", rule, path)
			}
		}
	})
}
