package policy

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// globRef is an obviously correct, exponential Glob for short inputs.
func globRef(p, s string) bool {
	if p == "" {
		return s == ""
	}
	_, sw := utf8.DecodeRuneInString(s)
	switch p[0] {
	case '*':
		return globRef(p[1:], s) || s != "" && globRef(p, s[sw:])
	case '?':
		return s != "" && globRef(p[1:], s[sw:])
	case '\\':
		if len(p) == 1 {
			return false
		}
		p = p[1:]
	}
	_, pw := utf8.DecodeRuneInString(p)
	return s != "" && pw == sw && p[:pw] == s[:sw] && globRef(p[pw:], s[sw:])
}

func FuzzGlob(f *testing.F) {
	for _, tt := range [][2]string{
		{"", ""}, {"*", ""}, {"a*b*c", "aXbYc"}, {"alice/*", "alice/x/y"},
		{"a?c", "aéc"}, {"*??", "é"}, {`a\*b`, "a*b"}, {`a\`, `a\`},
		{"\xc3", "é"}, {"?", "\xff"}, {"*a*a*b", "aaaaaaa"}, {"issue", "\u0456ssue"},
	} {
		f.Add(tt[0], tt[1])
	}
	f.Fuzz(func(t *testing.T, pattern, s string) {
		got := Glob(pattern, s)
		if len(pattern) < 12 && len(s) < 12 {
			if want := globRef(pattern, s); got != want {
				t.Fatalf("Glob(%q, %q) = %v, reference says %v", pattern, s, got, want)
			}
		}
		if got && checkGlob(pattern) == nil && !strings.ContainsAny(pattern, `*?\`) && pattern != s {
			t.Fatalf("literal pattern %q matched different %q", pattern, s)
		}
	})
}

func FuzzMatchArgs(f *testing.F) {
	for _, c := range allowCases {
		if len(strings.Join(c.args, "")) < 4096 {
			f.Add(strings.Join(c.args, "\x00"))
		}
	}
	for _, c := range denyCases {
		f.Add(strings.Join(c.args, "\x00"))
	}
	// Allow specs for the invariant: with AnyFlags false, a deny rule with
	// the same positional patterns catches whatever the allow rule admits.
	allows := []*ArgSpec{
		ghIssueCreate(),
		{Args: []string{"issue", "*", "**"}, Flags: ghIssueCreate().Flags},
		{Args: []string{"a*", "**"}, Flags: map[string]FlagSpec{"-a": {Bool: true}, "-b": {Values: []string{"*"}}, "--c": {Values: []string{"x*"}}}},
		{Args: []string{"push", "**"}, IfFlags: []string{"--force", "-f"}, Flags: map[string]FlagSpec{
			"--force": {Bool: true}, "-f": {Bool: true}, "-v": {Bool: true}, "-o": {Values: []string{"*"}}, "--repo": {Values: []string{"*"}}}},
		{Args: []string{"x"}, IfFlags: []string{"-n"}, AnyFlags: true},
		{IfFlags: []string{"--dry-run"}, Flags: map[string]FlagSpec{"--dry-run": {Bool: true}, "-C": {Values: []string{"*"}}}},
	}
	for _, a := range [][]string{
		{"push", "-fv", "origin"}, {"push", "-of", "origin"}, {"push", "--repo", "-f", "x"}, {"push", "--", "-f"},
		{"push", "--force=x"}, {"x", "-vn"}, {"-C", "--dry-run"}, {"--dry-run", "-C"},
	} {
		f.Add(strings.Join(a, "\x00"))
	}
	denies := []*ArgSpec{ghAuthToken, ghShowToken, gitPushF}
	f.Fuzz(func(t *testing.T, data string) {
		args := strings.Split(data, "\x00")
		for _, d := range denies {
			d.MatchDeny(args)
			d.MatchAllow(args)
		}
		for _, a := range allows {
			ok, why := a.MatchAllow(args)
			if ok != (why == "") {
				t.Fatalf("MatchAllow(%q) = %v with reason %q", args, ok, why)
			}
			a.MatchDeny(args)
			d := &ArgSpec{Args: a.Args}
			if ok && !d.MatchDeny(args) {
				t.Fatalf("allow %q admits %q but deny %q does not catch it", a.Args, args, d.Args)
			}
			// A confirm rule's obligation binds at least what the rule
			// itself admits.
			if ok && !a.MatchObligation(args) {
				t.Fatalf("allow %q if_flags %q admits %q but its obligation does not match it", a.Args, a.IfFlags, args)
			}
		}
	})
}
