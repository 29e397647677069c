package policy

import (
	"strings"
	"testing"
	"time"
)

func TestGlob(t *testing.T) {
	tests := []struct {
		name       string
		pattern, s string
		want       bool
	}{
		{"empty both", "", "", true},
		{"empty pattern", "", "a", false},
		{"empty string literal", "a", "", false},
		{"empty string star", "*", "", true},
		{"empty string question", "?", "", false},
		{"literal", "create", "create", true},
		{"literal differs", "create", "delete", false},
		{"literal prefix only", "create", "creates", false},
		{"star spans slash", "alice/*", "alice/x/y/z", true},
		{"star spans slash middle", "a*z", "a/b/c/z", true},
		{"star prefix mismatch", "alice/*", "evil/alice/x", false},
		{"question one byte", "a?c", "abc", true},
		{"question one rune", "a?c", "aéc", true},
		{"question one rune 4 bytes", "a?c", "a😀c", true},
		{"question not two runes", "a?c", "abbc", false},
		{"question not zero", "a?c", "ac", false},
		{"star question rune", "*?", "é", true},
		{"star two questions one rune", "*??", "é", false},
		{"escaped star literal", `a\*b`, "a*b", true},
		{"escaped star not wild", `a\*b`, "axb", false},
		{"escaped question", `\?`, "?", true},
		{"escaped question not wild", `\?`, "x", false},
		{"escaped backslash", `a\\b`, `a\b`, true},
		{"escaped plain char", `\a`, "a", true},
		{"escaped multibyte", `\é`, "é", true},
		{"unterminated escape", `a\`, `a\`, false},
		{"unterminated escape star", `*\`, `\`, false},
		{"abc stars", "a*b*c", "abc", true},
		{"abc stars gaps", "a*b*c", "aXXbYYc", true},
		{"abc stars repeat", "a*b*c", "abcbc", true},
		{"abc stars trailing", "a*b*c", "abcd", false},
		{"abc stars missing b", "a*b*c", "ac", false},
		{"abc stars backtrack", "a*b*c", "abbbcbx", false},
		{"double star", "**", "a/b", true},
		{"cyrillic i", "issue", "\u0456ssue", false},
		{"fullwidth", "issue", "ｉｓｓｕｅ", false},
		{"case", "issue", "Issue", false},
		{"nfc vs nfd", "é", "e\u0301", false},
		{"invalid byte literal", "\xc3", "é", false},
		{"invalid byte question", "?", "\xff", true},
		{"replacement char vs invalid", "\uFFFD", "\xff", false},
		{"nul", "a?b", "a\x00b", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Glob(tt.pattern, tt.s); got != tt.want {
				t.Errorf("Glob(%q, %q) = %v, want %v", tt.pattern, tt.s, got, tt.want)
			}
		})
	}
}

// within fails the test if f does not return within d (an exponential
// matcher would never return).
func within(t *testing.T, d time.Duration, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	select {
	case <-done:
	case <-time.After(d):
		t.Fatalf("did not finish within %v", d)
	}
}

func TestGlobPathological(t *testing.T) {
	as := strings.Repeat("a", 100_000)
	tests := []struct {
		name, pattern, s string
		want             bool
	}{
		{"stars a then b", "*a*a*a*a*a*b", as, false},
		{"stars a then a", "*a*a*a*a*a*a", as, true},
		{"many questions", "*" + strings.Repeat("?", 50) + "b", as, false},
		{"many stars", strings.Repeat("*a", 1000) + "b", as, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			within(t, time.Second, func() {
				if got := Glob(tt.pattern, tt.s); got != tt.want {
					t.Errorf("Glob = %v, want %v", got, tt.want)
				}
			})
		})
	}
}

// ghIssueCreate is an allow rule for `gh issue create` in alice's repos.
func ghIssueCreate() *ArgSpec {
	return &ArgSpec{
		Args: []string{"issue", "create"},
		Flags: map[string]FlagSpec{
			"--repo":  {Values: []string{"alice/*"}},
			"-R":      {Values: []string{"alice/*"}},
			"--title": {Values: []string{"*"}},
			"--body":  {Values: []string{"*"}},
			"--web":   {Bool: true},
			"-w":      {Bool: true},
			"--label": {Values: []string{"bug", "docs"}},
		},
	}
}

type allowCase struct {
	name string
	spec func() *ArgSpec // nil: ghIssueCreate
	args []string
	want bool
	why  string // a substring of the reason, when not matching
}

var bigTitle = strings.Repeat("t", 100_000)

var allowCases = []allowCase{
	{name: "plain", args: []string{"issue", "create"}, want: true},
	{name: "repo inline", args: []string{"issue", "create", "--repo=alice/x"}, want: true},
	{name: "repo separate", args: []string{"issue", "create", "--repo", "alice/x"}, want: true},
	{name: "repo inline evil", args: []string{"issue", "create", "--repo=evil/x"},
		why: `flag --repo value "evil/x" does not match "alice/*"`},
	{name: "repo separate evil", args: []string{"issue", "create", "--repo", "evil/x"},
		why: `flag --repo value "evil/x" does not match "alice/*"`},
	{name: "repo lookalike owner", args: []string{"issue", "create", "--repo=аlice/x"}, why: "does not match"},
	{name: "repo twice both ok", args: []string{"--repo=alice/a", "issue", "create", "--repo", "alice/b"}, want: true},
	{name: "repo twice second evil", args: []string{"--repo=alice/a", "issue", "create", "--repo", "evil/b"}, why: "evil/b"},
	{name: "short separate", args: []string{"issue", "create", "-R", "alice/x"}, want: true},
	{name: "short attached", args: []string{"issue", "create", "-Ralice/x"}, want: true},
	{name: "short attached evil", args: []string{"issue", "create", "-Revil/x"}, why: `flag -R value "evil/x"`},
	{name: "short equals both readings", args: []string{"issue", "create", "-R=alice/x"}, why: `"=alice/x"`},
	{name: "combined short", args: []string{"issue", "create", "-wR", "alice/x"}, want: true},
	{name: "combined short evil", args: []string{"issue", "create", "-wR", "evil/x"}, why: "evil/x"},
	{name: "combined value first", args: []string{"issue", "create", "-Rw"}, why: `flag -R value "w"`},
	{name: "short missing value", args: []string{"issue", "create", "-R"}, why: "missing value for -R"},
	{name: "double dash then flag words", args: []string{"issue", "create", "--", "--repo=evil/x"},
		why: "3 positional arguments, rule expects 2"},
	{name: "double dash then flag words ok count", args: []string{"issue", "--", "--repo=evil/x"},
		why: `argument 2 "--repo=evil/x" does not match "create"`},
	{name: "double dash first", args: []string{"--", "issue", "create"}, want: true},
	{name: "options after positionals", args: []string{"issue", "create", "--title", "t"}, want: true},
	{name: "options before positionals", args: []string{"--title", "t", "issue", "create"}, want: true},
	{name: "options between positionals", args: []string{"issue", "--body=b", "create"}, want: true},
	{name: "title swallows flag", args: []string{"issue", "create", "--title", "--repo=evil/x"}, want: true},
	{name: "title swallows double dash", args: []string{"issue", "--title", "--", "create"}, want: true},
	{name: "unknown flag inline", args: []string{"issue", "create", "--config=/etc/x"}, why: "flag --config is not allowed"},
	{name: "unknown flag separate", args: []string{"issue", "create", "--config", "/etc/x"}, why: "flag --config is not allowed"},
	{name: "unknown short", args: []string{"issue", "create", "-c"}, why: "flag -c is not allowed"},
	{name: "unknown short in group", args: []string{"issue", "create", "-wc"}, why: "flag -c is not allowed"},
	{name: "abbreviation refused", args: []string{"issue", "create", "--rep=alice/x"}, why: "flag --rep is not allowed"},
	{name: "triple dash", args: []string{"issue", "create", "---repo=alice/x"}, why: "not allowed"},
	{name: "single dash long", args: []string{"issue", "create", "-repo=alice/x"}, why: "flag -r is not allowed"},
	{name: "empty long name", args: []string{"issue", "create", "--=x"}, why: "malformed flag"},
	{name: "bool flag", args: []string{"issue", "create", "--web"}, want: true},
	{name: "bool flag with value", args: []string{"issue", "create", "--web=1"}, why: "flag --web takes no value"},
	{name: "bool flag with empty value", args: []string{"issue", "create", "--web="}, why: "takes no value"},
	{name: "bool short then equals", args: []string{"issue", "create", "-w=1"}, why: `flag -= is not allowed`},
	{name: "missing value at end", args: []string{"issue", "create", "--repo"}, why: "missing value for --repo"},
	{name: "label ok", args: []string{"issue", "create", "--label", "bug", "--label=docs"}, want: true},
	{name: "label bad", args: []string{"issue", "create", "--label", "bug", "--label=evil"},
		why: `flag --label value "evil" does not match any of "bug", "docs"`},
	{name: "extra positional", args: []string{"issue", "create", "now"}, why: "3 positional arguments, rule expects 2"},
	{name: "missing positional", args: []string{"issue"}, why: "1 positional argument, rule expects 2"},
	{name: "no arguments", args: nil, why: "0 positional arguments, rule expects 2"},
	{name: "wrong positional", args: []string{"issue", "delete"}, why: `argument 2 "delete" does not match "create"`},
	{name: "dash is positional", args: []string{"issue", "-"}, why: `argument 2 "-" does not match "create"`},
	{name: "cyrillic i", args: []string{"\u0456ssue", "create"}, why: "argument 1"},
	{name: "fullwidth", args: []string{"ｉｓｓｕｅ", "create"}, why: "argument 1"},
	{name: "empty vs literal", args: []string{"issue", ""}, why: `argument 2 "" does not match "create"`},
	{name: "empty title", args: []string{"issue", "create", "--title", ""}, want: true},
	{name: "empty vs star", spec: func() *ArgSpec { return &ArgSpec{Args: []string{"issue", "*"}} },
		args: []string{"issue", ""}, want: true},
	{name: "big title", args: []string{"issue", "create", "--title", bigTitle}, want: true},
	{name: "nul in value", args: []string{"issue", "create", "--title", "a\x00b"}, want: true},
	{name: "nul in positional", args: []string{"iss\x00ue", "create"}, why: "argument 1"},
	{name: "nul flag", args: []string{"issue", "create", "--\x00"}, why: "not allowed"},
	{name: "invalid utf8 short", args: []string{"issue", "create", "-\xff"}, why: `flag "-\xff" is not allowed`},

	// AnyFlags, as for `/bin/sh -c 'exit 7'` and `git status`.
	{name: "any flags rest", spec: shAny, args: []string{"-c", "exit 7"}, want: true},
	{name: "any flags rest empty", spec: shAny, args: nil, want: true},
	{name: "any flags rest with double dash", spec: shAny, args: []string{"-e", "--", "-x"}, want: true},
	{name: "any flags value is positional", spec: gitStatus, args: []string{"-C", "/etc", "status"},
		why: "2 positional arguments, rule expects 1"},
	{name: "any flags inline value", spec: gitStatus, args: []string{"--git-dir=/x", "status"}, want: true},
	{name: "any flags after", spec: gitStatus, args: []string{"status", "--porcelain", "-sb"}, want: true},
	{name: "any flags wrong positional", spec: gitStatus, args: []string{"push"}, why: `argument 1 "push"`},
	{name: "any flags no args", spec: func() *ArgSpec { return &ArgSpec{AnyFlags: true} },
		args: []string{"-x", "--y=z"}, want: true},
	{name: "any flags no args positional", spec: func() *ArgSpec { return &ArgSpec{AnyFlags: true} },
		args: []string{"-x", "z"}, why: "1 positional argument, rule expects 0"},
	{name: "rest needs fixed", spec: func() *ArgSpec { return &ArgSpec{Args: []string{"a", "**"}} },
		args: nil, why: "rule expects at least 1"},

	// An invalid spec never matches.
	{name: "invalid spec", spec: func() *ArgSpec { return &ArgSpec{Args: []string{"**", "issue"}} },
		args: []string{"issue"}, why: "invalid rule"},
	{name: "nil spec empty argv", spec: func() *ArgSpec { return nil }, args: nil, want: true},
	{name: "nil spec", spec: func() *ArgSpec { return nil }, args: []string{"x"}, why: "rule expects 0"},
}

func shAny() *ArgSpec     { return &ArgSpec{Args: []string{"**"}, AnyFlags: true} }
func gitStatus() *ArgSpec { return &ArgSpec{Args: []string{"status"}, AnyFlags: true} }

func TestMatchAllow(t *testing.T) {
	for _, tt := range allowCases {
		t.Run(tt.name, func(t *testing.T) {
			spec := ghIssueCreate()
			if tt.spec != nil {
				spec = tt.spec()
			}
			got, why := spec.MatchAllow(tt.args)
			if got != tt.want {
				t.Fatalf("MatchAllow(%q) = %v (%s), want %v", tt.args, got, why, tt.want)
			}
			if !got && !strings.Contains(why, tt.why) {
				t.Errorf("reason %q does not contain %q", why, tt.why)
			}
			if got && why != "" {
				t.Errorf("reason %q for a match", why)
			}
		})
	}
}

func TestMatchAllowReasonIsShort(t *testing.T) {
	_, why := ghIssueCreate().MatchAllow([]string{"issue", bigTitle})
	if len(why) > 200 {
		t.Errorf("reason is %d bytes", len(why))
	}
	_, why = ghIssueCreate().MatchAllow([]string{"issue", "create", "--" + bigTitle})
	if len(why) > 200 {
		t.Errorf("reason is %d bytes", len(why))
	}
}

// Deny specs for gh and git.
var (
	ghAuthToken = &ArgSpec{Args: []string{"auth", "token", "**"}}
	ghShowToken = &ArgSpec{Args: []string{"auth", "status", "**"}, IfFlags: []string{"--show-token", "-t"}}
	gitPushF    = &ArgSpec{Args: []string{"push", "**"}, IfFlags: []string{"--force", "-f", "--force-with-lease"}}
)

type denyCase struct {
	name string
	spec *ArgSpec
	args []string
	want bool
}

var denyCases = []denyCase{
	{"token plain", ghAuthToken, []string{"auth", "token"}, true},
	{"token flag value before", ghAuthToken, []string{"--hostname", "x", "auth", "token"}, true},
	{"token inline flag between", ghAuthToken, []string{"auth", "--hostname=x", "token"}, true},
	{"token flag between", ghAuthToken, []string{"auth", "--hostname", "x", "token"}, true},
	{"token short value before", ghAuthToken, []string{"-R", "x", "auth", "token"}, true},
	{"token double dash", ghAuthToken, []string{"--", "auth", "token"}, true},
	{"token after double dash value", ghAuthToken, []string{"--hostname", "--", "auth", "token"}, true},
	{"token flag after", ghAuthToken, []string{"auth", "token", "--show"}, true},
	{"token more positionals", ghAuthToken, []string{"auth", "token", "x", "y"}, true},
	{"token other command", ghAuthToken, []string{"auth", "status"}, false},
	{"token too short", ghAuthToken, []string{"auth"}, false},
	{"token empty", ghAuthToken, nil, false},
	{"token not droppable", ghAuthToken, []string{"api", "auth", "token"}, false},
	{"token inline not droppable", ghAuthToken, []string{"--x=api", "api", "auth", "token"}, false},
	{"token lookalike", ghAuthToken, []string{"auth", "tokеn"}, false},

	{"show-token long", ghShowToken, []string{"auth", "status", "--show-token"}, true},
	{"show-token short", ghShowToken, []string{"auth", "status", "-t"}, true},
	{"show-token group", ghShowToken, []string{"auth", "status", "-ht"}, true},
	{"show-token group may be value", ghShowToken, []string{"auth", "status", "-htx"}, true},
	{"show-token inline", ghShowToken, []string{"auth", "status", "--show-token=true"}, true},
	{"show-token before", ghShowToken, []string{"-t", "auth", "status"}, true},
	{"show-token abbreviated", ghShowToken, []string{"auth", "status", "--show-t"}, true},
	{"show-token go flag style", ghShowToken, []string{"auth", "status", "-show-token"}, true},
	{"show-token double dash short", ghShowToken, []string{"auth", "status", "--t"}, true},
	{"show-token as value", ghShowToken, []string{"auth", "status", "--hostname", "-t"}, true},
	{"show-token absent", ghShowToken, []string{"auth", "status"}, false},
	{"show-token after double dash", ghShowToken, []string{"auth", "status", "--", "-t"}, false},
	{"show-token double dash may be value", ghShowToken, []string{"auth", "status", "--hostname", "--", "-t"}, true},
	{"show-token in inline value", ghShowToken, []string{"auth", "status", "--hostname=-t"}, false},
	{"show-token other command", ghShowToken, []string{"auth", "login", "-t"}, false},
	{"show-token other long", ghShowToken, []string{"auth", "status", "--show-tokens"}, false},

	{"force long", gitPushF, []string{"push", "--force"}, true},
	{"force short", gitPushF, []string{"push", "-f"}, true},
	{"force group", gitPushF, []string{"push", "-uf", "origin", "main"}, true},
	{"force after positionals", gitPushF, []string{"push", "origin", "main", "--force"}, true},
	{"force before command", gitPushF, []string{"-C", "/repo", "push", "-f"}, true},
	{"force with lease", gitPushF, []string{"push", "--force-with-lease"}, true},
	{"force with lease value", gitPushF, []string{"push", "--force-with-lease=main:abc"}, true},
	{"force abbreviated", gitPushF, []string{"push", "--forc"}, true},
	{"force as push option value", gitPushF, []string{"push", "-o", "--force"}, true},
	{"force absent", gitPushF, []string{"push", "origin", "main"}, false},
	// Known limit: a "+" refspec force-pushes one ref without any flag.
	// IfFlags cannot see it; a rule must match "+*" positionals for that.
	{"force refspec is not a flag", gitPushF, []string{"push", "origin", "+main"}, false},
	{"force negated", gitPushF, []string{"push", "--no-force"}, false},
	{"force after double dash", gitPushF, []string{"push", "--", "-f"}, false},
	{"force other command", gitPushF, []string{"pull", "--force"}, false},

	{"empty args matches any positionals", &ArgSpec{IfFlags: []string{"-x"}}, []string{"a", "b", "-x"}, true},
	{"empty args needs flag", &ArgSpec{IfFlags: []string{"-x"}}, []string{"a", "b"}, false},
	{"empty spec matches all", &ArgSpec{}, []string{"anything"}, true},
	{"empty if_flags is no constraint", &ArgSpec{Args: []string{"a"}, IfFlags: []string{}}, []string{"a"}, true},
	{"nil spec matches all", nil, []string{"x"}, true},
	{"flag-like positional pattern", &ArgSpec{Args: []string{"push", "--force"}}, []string{"push", "--force"}, true},
	{"star middle liberal", &ArgSpec{Args: []string{"**", "token"}}, []string{"a", "b", "token"}, true},
	{"no args no patterns", &ArgSpec{Args: []string{"**"}}, nil, true},
}

func TestMatchDeny(t *testing.T) {
	for _, tt := range denyCases {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.spec.MatchDeny(tt.args); got != tt.want {
				t.Errorf("MatchDeny(%q) = %v, want %v", tt.args, got, tt.want)
			}
		})
	}
}

func TestMatchLarge(t *testing.T) {
	// 1024 arguments of 100 bytes, alternating flag-like tokens: every
	// token after a flag is droppable, so the deny search has many paths.
	var args []string
	for i := range 1024 {
		if i%2 == 0 {
			args = append(args, "-"+strings.Repeat("x", 99))
		} else {
			args = append(args, strings.Repeat("a", 100))
		}
	}
	deny := &ArgSpec{Args: []string{"*a*a*a*b", "*", "*", "*", "*", "*", "*", "*", "*", "**"}, IfFlags: []string{"--y", "-z"}}
	allow := &ArgSpec{Args: []string{"*a*a*a*b", "**"}, AnyFlags: true}
	big := []string{"-t" + strings.Repeat("y", 100_000), strings.Repeat("a", 100_000)}
	within(t, time.Second, func() {
		if deny.MatchDeny(args) {
			t.Error("deny matched")
		}
		if ok, _ := allow.MatchAllow(args); ok {
			t.Error("allow matched")
		}
		if deny.MatchDeny(big) {
			t.Error("deny matched big")
		}
		if !(&ArgSpec{Args: []string{"*a*a*a*a"}}).MatchDeny(big) {
			t.Error("deny did not match big")
		}
	})
}

func TestValidate(t *testing.T) {
	bad := []struct {
		name string
		spec ArgSpec
	}{
		{"rest not last", ArgSpec{Args: []string{"**", "x"}}},
		{"rest twice", ArgSpec{Args: []string{"**", "**"}}},
		{"single dash long", ArgSpec{Flags: map[string]FlagSpec{"-long": {Bool: true}}}},
		{"no dash", ArgSpec{Flags: map[string]FlagSpec{"repo": {Bool: true}}}},
		{"double dash only", ArgSpec{Flags: map[string]FlagSpec{"--": {Bool: true}}}},
		{"single dash only", ArgSpec{Flags: map[string]FlagSpec{"-": {Bool: true}}}},
		{"triple dash", ArgSpec{Flags: map[string]FlagSpec{"---x": {Bool: true}}}},
		{"long starts with dot", ArgSpec{Flags: map[string]FlagSpec{"--.x": {Bool: true}}}},
		{"long with equals", ArgSpec{Flags: map[string]FlagSpec{"--x=y": {Bool: true}}}},
		{"long with space", ArgSpec{Flags: map[string]FlagSpec{"--x y": {Bool: true}}}},
		{"short punctuation", ArgSpec{Flags: map[string]FlagSpec{"-!": {Bool: true}}}},
		{"short non-ascii", ArgSpec{Flags: map[string]FlagSpec{"-é": {Bool: true}}}},
		{"neither bool nor values", ArgSpec{Flags: map[string]FlagSpec{"--x": {}}}},
		{"empty values", ArgSpec{Flags: map[string]FlagSpec{"--x": {Values: []string{}}}}},
		{"any flags with flags", ArgSpec{AnyFlags: true, Flags: map[string]FlagSpec{"--x": {Bool: true}}}},
		{"if_flags no dash", ArgSpec{IfFlags: []string{"force"}}},
		{"if_flags single dash long", ArgSpec{IfFlags: []string{"-force"}}},
		{"if_flags empty", ArgSpec{IfFlags: []string{""}}},
		{"arg nul", ArgSpec{Args: []string{"a\x00b"}}},
		{"arg invalid utf8", ArgSpec{Args: []string{"a\xffb"}}},
		{"arg unterminated escape", ArgSpec{Args: []string{`abc\`}}},
		{"value nul", ArgSpec{Flags: map[string]FlagSpec{"--x": {Values: []string{"\x00"}}}}},
		{"value invalid utf8", ArgSpec{Flags: map[string]FlagSpec{"--x": {Values: []string{"\xc3"}}}}},
		{"value unterminated escape", ArgSpec{Flags: map[string]FlagSpec{"--x": {Values: []string{`a\`}}}}},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.spec.Validate(); err == nil {
				t.Error("Validate() = nil, want an error")
			}
		})
	}
	good := []struct {
		name string
		spec *ArgSpec
	}{
		{"gh issue create", ghIssueCreate()},
		{"sh any", shAny()},
		{"git status", gitStatus()},
		{"auth token", ghAuthToken},
		{"show token", ghShowToken},
		{"push force", gitPushF},
		{"empty", &ArgSpec{}},
		{"nil", nil},
		{"short question and digit", &ArgSpec{Flags: map[string]FlagSpec{"-?": {Bool: true}, "-1": {Bool: true}}}},
		{"long with dots", &ArgSpec{Flags: map[string]FlagSpec{"--a.b_c-d": {Values: []string{"*"}}}}},
		{"escapes", &ArgSpec{Args: []string{`\\`, `a\*`, `\é`}}},
		{"rest only", &ArgSpec{Args: []string{"**"}}},
		{"unicode pattern", &ArgSpec{Args: []string{"ｉｓｓｕｅ"}}},
	}
	for _, tt := range good {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.spec.Validate(); err != nil {
				t.Errorf("Validate() = %v", err)
			}
		})
	}
}
