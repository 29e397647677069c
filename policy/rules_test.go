package policy_test

import (
	"strings"
	"testing"
	"time"

	"coily.dev/coily/policy"
)

// parse parses a policy from a YAML string, failing the test on error.
func parse(t testing.TB, name, src string) *policy.Policy {
	t.Helper()
	p, err := policy.Parse(name, []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// featurePolicies are the policies featureCases run against. They name
// binaries every Unix host has, so that the rules resolve: /bin/echo plays
// gh, /bin/cat a command with a config file, /bin/ls and /bin/sh the rest.
var featurePolicies = map[string]string{
	"gh": `version: 1
roles:
  agent:
    permissions: [exec]
    commands: [gh-issue-create, gh-issue-view, gh-api-get]
  owner:
    permissions: [exec]
    commands: ["*"]
grants:
  - principals: ["tag:agent"]
    roles: [agent]
  - principals: [alice@example.com]
    roles: [owner]
commands:
  - name: gh-auth-token
    effect: deny
    binary: /bin/echo
    args: [auth, token, "**"]
    reason: coily never hands out the GitHub token
  - name: gh-auth-show-token
    effect: deny
    binary: /bin/echo
    args: [auth, status, "**"]
    if_flags: [--show-token, -t]
    reason: coily never hands out the GitHub token
  - name: gh-api
    effect: deny
    binary: /bin/echo
    args: [api, "**"]
    reason: raw API calls bypass the per-command rules
    report: true
  - name: gh-issue-create
    binary: /bin/echo
    args: [issue, create]
    flags:
      --repo: "alice/*"
      -R: "alice/*"
      --title: "*"
      -t: "*"
      --body: "*"
      -b: "*"
      --label: [bug, docs]
      -l: [bug, docs]
      --web: true
      -w: true
    env: [GH_PROMPT_DISABLED, NO_COLOR]
  - name: gh-issue-view
    binary: /bin/echo
    args: [issue, view, "*"]
    flags:
      --repo: "alice/*"
      --comments: true
  - name: gh-api-get
    binary: /bin/echo
    args: [api, "repos/alice/*"]
  - name: gh-auth
    binary: /bin/echo
    args: [auth, "**"]
    flags: any
  - name: gh-owner-any
    binary: /bin/echo
    args: ["**"]
    flags: any
`,
	"config": `version: 1
roles:
  all:
    permissions: [exec]
    commands: ["*"]
grants:
  - principals: ["*"]
    roles: [all]
commands:
  - name: sh-no-c
    effect: deny
    binary: /bin/sh
    if_flags: [--config, -c]
    args: ["**"]
  - name: cat-config
    binary: /bin/cat
    args: ["*"]
    flags:
      --config: "/etc/coily/*"
      -c: "/etc/coily/*"
      -f: true
      -v: true
  - name: sh
    binary: /bin/sh
    args: ["**"]
    flags: any
`,
	"order": `version: 1
roles:
  all:
    permissions: [exec]
    commands: ["*"]
  some:
    permissions: [exec]
    commands: [ls-tmp-late]
grants:
  - principals: [anyone]
    roles: [all]
  - principals: [limited]
    roles: [some]
commands:
  - name: ls-any
    binary: /bin/ls
    args: ["**"]
    flags: any
  - name: deny-root
    effect: deny
    binary: /bin/ls
    args: ["/root", "**"]
    reason: not root's home
  - name: deny-root-again
    effect: deny
    binary: /bin/ls
    args: ["/root*"]
    reason: never reached for /root
  - name: report-etc
    effect: deny
    binary: /bin/ls
    args: ["/etc/**"]
    report: true
  - name: report-etc-shadow
    effect: deny
    binary: /bin/ls
    args: ["**"]
    if_flags: [--shadow]
    report: true
  - name: deny-etc-secret
    effect: deny
    binary: /bin/ls
    args: ["/etc/secret"]
  - name: ls-tmp-late
    binary: /bin/ls
    args: ["/tmp/*"]
`,
}

// A featureCase is one request against one of featurePolicies.
type featureCase struct {
	name   string
	policy string
	s      policy.Subject
	argv   []string
	env    []string
	result policy.Result
	rule   string   // the deciding rule, "" for none
	reason string   // a substring of the reason
	would  []string // WouldDeny
}

var (
	agent  = policy.Subject{Principal: "tag:agent"}
	owner  = policy.Subject{Principal: "alice@example.com"}
	nobody = policy.Subject{Principal: "nobody@example.com"}
	anyone = policy.Subject{Principal: "anyone"}
)

var big = strings.Repeat("x", 100<<10)

var featureCases = []featureCase{
	// Deny rules come first, whatever the file order and whoever asks.
	{"deny before allow", "gh", owner, []string{"/bin/echo", "auth", "token"}, nil, policy.Deny, "gh-auth-token",
		`coily never hands out the GitHub token (rule "gh-auth-token")`, nil},
	{"deny applies to everyone", "gh", nobody, []string{"/bin/echo", "auth", "token", "--hostname", "x"}, nil, policy.Deny, "gh-auth-token",
		`coily never hands out the GitHub token`, nil},
	{"deny rule later in the file still first", "order", anyone, []string{"/bin/ls", "/root"}, nil, policy.Deny, "deny-root",
		`not root's home (rule "deny-root")`, nil},
	{"first matching deny rule decides", "order", anyone, []string{"/bin/ls", "/rootx"}, nil, policy.Deny, "deny-root-again",
		`never reached for /root (rule "deny-root-again")`, nil},
	// An enforcing deny keeps the report-mode notes met before it: the
	// audit record shows both.
	{"deny without reason", "order", anyone, []string{"/bin/ls", "/etc/secret"}, nil, policy.Deny, "deny-etc-secret",
		`denied by rule deny-etc-secret (rule "deny-etc-secret")`, []string{"report-etc"}},
	{"deny reads a flag value as a positional", "order", anyone, []string{"/bin/ls", "--color", "/root"}, nil, policy.Deny, "deny-root", "not root's home", nil},
	{"deny after --", "order", anyone, []string{"/bin/ls", "--", "/root"}, nil, policy.Deny, "deny-root", "not root's home", nil},
	{"deny with options after positionals", "order", anyone, []string{"/bin/ls", "/root", "-la"}, nil, policy.Deny, "deny-root", "not root's home", nil},
	{"deny unrelated args", "order", anyone, []string{"/bin/ls", "/home", "-la"}, nil, policy.Allow, "ls-any", `allowed by rule "ls-any"`, nil},
	{"deny unicode look-alike is not the path", "order", anyone, []string{"/bin/ls", "/r\u043e\u043et"}, nil, policy.Allow, "ls-any", "", nil},

	// Report mode: allowed, but recorded.
	{"report mode allows", "gh", agent, []string{"/bin/echo", "api", "repos/alice/x"}, nil, policy.Allow, "gh-api-get",
		`allowed by rule "gh-api-get"`, []string{"gh-api"}},
	{"report mode then no allow rule", "gh", agent, []string{"/bin/echo", "api", "repos/bob/x"}, nil, policy.Deny, "",
		`no rule allows it: rule "gh-issue-create": `, []string{"gh-api"}},
	{"two report rules in file order", "order", anyone, []string{"/bin/ls", "--shadow", "/etc/passwd"}, nil, policy.Allow, "ls-any", "",
		[]string{"report-etc", "report-etc-shadow"}},
	{"report rule not matching", "order", anyone, []string{"/bin/ls", "/tmp/x"}, nil, policy.Allow, "ls-any", "", nil},

	// The first allow rule the subject may use that matches wins.
	{"first matching allow rule wins", "gh", owner, []string{"/bin/echo", "issue", "view", "12"}, nil, policy.Allow, "gh-issue-view", "", nil},
	{"later allow rule when the first does not match", "gh", owner, []string{"/bin/echo", "issue", "view", "12", "--web"}, nil, policy.Allow, "gh-owner-any", "", nil},
	{"first allow rule the subject may use", "order", policy.Subject{Principal: "limited"}, []string{"/bin/ls", "/tmp/a"}, nil, policy.Allow, "ls-tmp-late", "", nil},
	{"no allow rule the subject may use matches", "order", policy.Subject{Principal: "limited"}, []string{"/bin/ls", "/tmp/a", "-l"}, nil, policy.Deny, "",
		`no rule allows it: rule "ls-any": limited may not use it; rule "ls-tmp-late": flag -l is not allowed`, nil},

	// The principal may not use the rule.
	{"principal may not use the rule", "gh", agent, []string{"/bin/echo", "auth", "status"}, nil, policy.Deny, "",
		`rule "gh-auth": tag:agent may not use it; rule "gh-owner-any": tag:agent may not use it`, nil},
	{"stranger may use no rule", "gh", nobody, []string{"/bin/echo", "issue", "view", "1"}, nil, policy.Deny, "",
		`rule "gh-issue-view": nobody@example.com may not use it`, nil},

	// if_flags: only when one of the flags may be present.
	{"if_flags absent", "gh", owner, []string{"/bin/echo", "auth", "status"}, nil, policy.Allow, "gh-auth", "", nil},
	{"if_flags long", "gh", owner, []string{"/bin/echo", "auth", "status", "--show-token"}, nil, policy.Deny, "gh-auth-show-token", "", nil},
	{"if_flags long with value", "gh", owner, []string{"/bin/echo", "auth", "status", "--show-token=1"}, nil, policy.Deny, "gh-auth-show-token", "", nil},
	{"if_flags abbreviated", "gh", owner, []string{"/bin/echo", "auth", "status", "--show-tok"}, nil, policy.Deny, "gh-auth-show-token", "", nil},
	{"if_flags single dash long", "gh", owner, []string{"/bin/echo", "auth", "status", "-show-token"}, nil, policy.Deny, "gh-auth-show-token", "", nil},
	{"if_flags short", "gh", owner, []string{"/bin/echo", "auth", "status", "-t"}, nil, policy.Deny, "gh-auth-show-token", "", nil},
	{"if_flags combined short", "gh", owner, []string{"/bin/echo", "auth", "status", "-ht"}, nil, policy.Deny, "gh-auth-show-token", "", nil},
	{"if_flags before positionals", "gh", owner, []string{"/bin/echo", "--show-token", "auth", "status"}, nil, policy.Deny, "gh-auth-show-token", "", nil},
	{"if_flags between positionals", "gh", owner, []string{"/bin/echo", "auth", "-t", "status"}, nil, policy.Deny, "gh-auth-show-token", "", nil},
	{"if_flags after a flag value", "gh", owner, []string{"/bin/echo", "auth", "--hostname", "github.com", "status", "-t"}, nil, policy.Deny, "gh-auth-show-token", "", nil},
	{"if_flags after -- is a positional", "gh", owner, []string{"/bin/echo", "auth", "status", "--", "--show-token"}, nil, policy.Allow, "gh-auth", "", nil},
	{"if_flags -- as a flag value", "gh", owner, []string{"/bin/echo", "auth", "status", "--hostname", "--", "--show-token"}, nil, policy.Deny, "gh-auth-show-token", "", nil},
	{"if_flags look-alike dash", "gh", owner, []string{"/bin/echo", "auth", "status", "\u2014show-token"}, nil, policy.Allow, "gh-auth", "", nil},
	{"if_flags other command", "gh", owner, []string{"/bin/echo", "issue", "list", "-t"}, nil, policy.Allow, "gh-owner-any", "", nil},
	{"if_flags without args", "config", anyone, []string{"/bin/sh", "-c", "true"}, nil, policy.Deny, "sh-no-c", "", nil},
	{"if_flags without args, none present", "config", anyone, []string{"/bin/sh", "-e", "x.sh"}, nil, policy.Allow, "sh", "", nil},
	{"if_flags in a combined group", "config", anyone, []string{"/bin/sh", "-ec", "true"}, nil, policy.Deny, "sh-no-c", "", nil},

	// Value flags: --opt=v and --opt v are the same.
	{"--config=/etc/x", "config", anyone, []string{"/bin/cat", "--config=/etc/x", "f"}, nil, policy.Deny, "",
		`rule "cat-config": flag --config value "/etc/x" does not match "/etc/coily/*"`, nil},
	{"--config /etc/x", "config", anyone, []string{"/bin/cat", "--config", "/etc/x", "f"}, nil, policy.Deny, "",
		`rule "cat-config": flag --config value "/etc/x" does not match "/etc/coily/*"`, nil},
	{"--config=/etc/coily/a", "config", anyone, []string{"/bin/cat", "--config=/etc/coily/a", "f"}, nil, policy.Allow, "cat-config", "", nil},
	{"--config /etc/coily/a", "config", anyone, []string{"/bin/cat", "--config", "/etc/coily/a", "f"}, nil, policy.Allow, "cat-config", "", nil},
	{"--config= empty value", "config", anyone, []string{"/bin/cat", "--config=", "f"}, nil, policy.Deny, "", `flag --config value "" does not match`, nil},
	{"--config empty value", "config", anyone, []string{"/bin/cat", "--config", "", "f"}, nil, policy.Deny, "", `flag --config value "" does not match`, nil},
	{"--config missing value", "config", anyone, []string{"/bin/cat", "f", "--config"}, nil, policy.Deny, "", `missing value for --config`, nil},
	{"--config takes -- as its value", "config", anyone, []string{"/bin/cat", "--config", "--", "f"}, nil, policy.Deny, "", `flag --config value "--" does not match`, nil},
	{"--config takes a flag-like value", "config", anyone, []string{"/bin/cat", "--config", "-v", "f"}, nil, policy.Deny, "", `flag --config value "-v" does not match`, nil},
	{"--config traversal", "config", anyone, []string{"/bin/cat", "--config", "/etc/coily/../shadow", "f"}, nil, policy.Allow, "cat-config", "", nil},
	{"-c/etc/coily/a", "config", anyone, []string{"/bin/cat", "-c/etc/coily/a", "f"}, nil, policy.Allow, "cat-config", "", nil},
	{"-c /etc/x", "config", anyone, []string{"/bin/cat", "-c", "/etc/x", "f"}, nil, policy.Deny, "", `flag -c value "/etc/x" does not match`, nil},
	{"-c=/etc/coily/a", "config", anyone, []string{"/bin/cat", "-c=/etc/coily/a", "f"}, nil, policy.Deny, "", `flag -c value "=/etc/coily/a" does not match`, nil},

	// Combined short flags.
	{"-fv", "config", anyone, []string{"/bin/cat", "-fv", "f"}, nil, policy.Allow, "cat-config", "", nil},
	{"-fvc value", "config", anyone, []string{"/bin/cat", "-fvc", "/etc/coily/a", "f"}, nil, policy.Allow, "cat-config", "", nil},
	{"-fvc/etc/x", "config", anyone, []string{"/bin/cat", "-fvc/etc/x", "f"}, nil, policy.Deny, "", `flag -c value "/etc/x" does not match`, nil},
	{"-fz unknown in group", "config", anyone, []string{"/bin/cat", "-fz", "f"}, nil, policy.Deny, "", `rule "cat-config": flag -z is not allowed`, nil},
	{"--fv is not a group", "config", anyone, []string{"/bin/cat", "--fv", "f"}, nil, policy.Deny, "", `flag --fv is not allowed`, nil},

	// Options after positionals, and "--".
	{"option after positional", "config", anyone, []string{"/bin/cat", "f", "-v"}, nil, policy.Allow, "cat-config", "", nil},
	{"value option after positional", "config", anyone, []string{"/bin/cat", "f", "--config", "/etc/x"}, nil, policy.Deny, "", `flag --config value "/etc/x"`, nil},
	{"-- then a flag-like word", "config", anyone, []string{"/bin/cat", "--", "--config"}, nil, policy.Allow, "cat-config", "", nil},
	{"-- then two words", "config", anyone, []string{"/bin/cat", "--", "-v", "f"}, nil, policy.Deny, "", `2 positional arguments, rule expects 1`, nil},
	{"-- then --", "config", anyone, []string{"/bin/cat", "--", "--"}, nil, policy.Allow, "cat-config", "", nil},
	{"single dash is positional", "config", anyone, []string{"/bin/cat", "-"}, nil, policy.Allow, "cat-config", "", nil},

	// Empty strings.
	{"empty positional", "config", anyone, []string{"/bin/cat", ""}, nil, policy.Allow, "cat-config", "", nil},
	{"empty positional too many", "config", anyone, []string{"/bin/cat", "", ""}, nil, policy.Deny, "", `2 positional arguments, rule expects 1`, nil},
	{"no positional", "config", anyone, []string{"/bin/cat"}, nil, policy.Deny, "", `0 positional arguments, rule expects 1`, nil},
	{"empty argument for a literal", "gh", agent, []string{"/bin/echo", "issue", ""}, nil, policy.Deny, "", `rule "gh-issue-create": argument 2 "" does not match "create"`, nil},

	// Unicode look-alikes never match.
	{"cyrillic i in a positional", "gh", agent, []string{"/bin/echo", "\u0456ssue", "create"}, nil, policy.Deny, "",
		"rule \"gh-issue-create\": argument 1 \"\u0456ssue\" does not match \"issue\"", nil},
	{"cyrillic e in a flag", "gh", agent, []string{"/bin/echo", "issue", "create", "--r\u0435po", "alice/x"}, nil, policy.Deny, "",
		"rule \"gh-issue-create\": flag \"--r\u0435po\" is not allowed", nil},
	{"fullwidth hyphens are positional", "gh", agent, []string{"/bin/echo", "issue", "create", "\uff0d\uff0drepo", "alice/x"}, nil, policy.Deny, "",
		`rule "gh-issue-create": 4 positional arguments, rule expects 2`, nil},
	{"unicode minus", "gh", agent, []string{"/bin/echo", "issue", "create", "\u2212R", "alice/x"}, nil, policy.Deny, "",
		`4 positional arguments, rule expects 2`, nil},
	{"look-alike in a value", "gh", agent, []string{"/bin/echo", "issue", "create", "-R", "\u0430lice/x"}, nil, policy.Deny, "",
		"flag -R value \"\u0430lice/x\" does not match \"alice/*\"", nil},
	{"zero-width space in a value", "gh", agent, []string{"/bin/echo", "issue", "create", "--label", "bug\u200b"}, nil, policy.Deny, "",
		"flag --label value \"bug\\u200b\" does not match any of \"bug\", \"docs\"", nil},

	// The gh-like rules: flag maps with value globs, booleans and lists.
	{"gh issue create", "gh", agent, []string{"/bin/echo", "issue", "create", "--repo", "alice/x", "--title", "T", "--body", "B"}, nil, policy.Allow, "gh-issue-create", "", nil},
	{"gh issue create short", "gh", agent, []string{"/bin/echo", "issue", "create", "-Ralice/x", "-tT", "-b", "B", "-w"}, nil, policy.Allow, "gh-issue-create", "", nil},
	{"gh flags first", "gh", agent, []string{"/bin/echo", "--repo=alice/x", "issue", "--title", "T", "create"}, nil, policy.Allow, "gh-issue-create", "", nil},
	{"gh -R=", "gh", agent, []string{"/bin/echo", "issue", "create", "-R=alice/x"}, nil, policy.Deny, "", `flag -R value "=alice/x" does not match "alice/*"`, nil},
	{"gh other owner", "gh", agent, []string{"/bin/echo", "issue", "create", "--repo", "bob/x"}, nil, policy.Deny, "",
		`rule "gh-issue-create": flag --repo value "bob/x" does not match "alice/*"`, nil},
	{"gh owner prefix", "gh", agent, []string{"/bin/echo", "issue", "create", "--repo", "alice"}, nil, policy.Deny, "", `flag --repo value "alice"`, nil},
	{"gh label list", "gh", agent, []string{"/bin/echo", "issue", "create", "--label", "bug", "-l", "docs", "--label=docs"}, nil, policy.Allow, "gh-issue-create", "", nil},
	{"gh label not listed", "gh", agent, []string{"/bin/echo", "issue", "create", "--label", "wontfix"}, nil, policy.Deny, "",
		`flag --label value "wontfix" does not match any of "bug", "docs"`, nil},
	{"gh label case", "gh", agent, []string{"/bin/echo", "issue", "create", "-l", "Bug"}, nil, policy.Deny, "", `flag -l value "Bug"`, nil},
	{"gh boolean", "gh", agent, []string{"/bin/echo", "issue", "create", "--web"}, nil, policy.Allow, "gh-issue-create", "", nil},
	{"gh boolean with value", "gh", agent, []string{"/bin/echo", "issue", "create", "--web=true"}, nil, policy.Deny, "", `flag --web takes no value`, nil},
	{"gh boolean then positional", "gh", agent, []string{"/bin/echo", "issue", "--web", "create"}, nil, policy.Allow, "gh-issue-create", "", nil},
	{"gh value flag eats the next word", "gh", agent, []string{"/bin/echo", "issue", "create", "--repo", "--web"}, nil, policy.Deny, "", `flag --repo value "--web"`, nil},
	{"gh flag not listed", "gh", agent, []string{"/bin/echo", "issue", "create", "--assignee", "bob"}, nil, policy.Deny, "", `flag --assignee is not allowed`, nil},
	{"gh too many positionals", "gh", agent, []string{"/bin/echo", "issue", "create", "extra"}, nil, policy.Deny, "", `3 positional arguments, rule expects 2`, nil},
	{"gh view star", "gh", agent, []string{"/bin/echo", "issue", "view", "12", "--comments"}, nil, policy.Allow, "gh-issue-view", "", nil},
	{"gh view missing", "gh", agent, []string{"/bin/echo", "issue", "view"}, nil, policy.Deny, "", `rule "gh-issue-view": 2 positional arguments, rule expects 3`, nil},

	// 100 kB arguments.
	{"100 kB title", "gh", agent, []string{"/bin/echo", "issue", "create", "--title", big}, nil, policy.Allow, "gh-issue-create", "", nil},
	{"100 kB repo", "gh", agent, []string{"/bin/echo", "issue", "create", "--repo=alice/" + big}, nil, policy.Allow, "gh-issue-create", "", nil},
	{"100 kB label", "gh", agent, []string{"/bin/echo", "issue", "create", "--label", big}, nil, policy.Deny, "", `flag --label value "xxxx`, nil},
	{"100 kB positional", "gh", agent, []string{"/bin/echo", "issue", big}, nil, policy.Deny, "", `argument 2 "xxxx`, nil},
	{"100 kB flag name", "gh", agent, []string{"/bin/echo", "issue", "create", "--" + big}, nil, policy.Deny, "", `flag "--xxxx`, nil},
	{"100 kB after deny words", "gh", owner, []string{"/bin/echo", "auth", "token", big}, nil, policy.Deny, "gh-auth-token", "", nil},

	// env: only the variables the rule lists.
	{"env allowed", "gh", agent, []string{"/bin/echo", "issue", "create"}, []string{"NO_COLOR", "GH_PROMPT_DISABLED"}, policy.Allow, "gh-issue-create", "", nil},
	{"env not allowed", "gh", agent, []string{"/bin/echo", "issue", "create"}, []string{"NO_COLOR", "GH_TOKEN"}, policy.Deny, "",
		`rule "gh-issue-create": environment variable GH_TOKEN is not allowed`, nil},
	{"env case matters", "gh", agent, []string{"/bin/echo", "issue", "create"}, []string{"no_color"}, policy.Deny, "", `environment variable no_color is not allowed`, nil},
	{"env empty name", "gh", agent, []string{"/bin/echo", "issue", "create"}, []string{""}, policy.Deny, "", `environment variable  is not allowed`, nil},
	{"env on a rule listing none", "gh", agent, []string{"/bin/echo", "issue", "view", "1"}, []string{"NO_COLOR"}, policy.Deny, "",
		`rule "gh-issue-view": environment variable NO_COLOR is not allowed`, nil},
	{"env falls through to a later rule", "gh", owner, []string{"/bin/echo", "issue", "view", "1"}, []string{"NO_COLOR"}, policy.Deny, "",
		`rule "gh-owner-any": environment variable NO_COLOR is not allowed`, nil},
	{"env with value syntax", "gh", agent, []string{"/bin/echo", "issue", "create"}, []string{"NO_COLOR=1"}, policy.Deny, "", `environment variable NO_COLOR=1 is not allowed`, nil},
}

func TestDecideExecFeatures(t *testing.T) {
	policies := map[string]*policy.Policy{}
	for name, src := range featurePolicies {
		policies[name] = parse(t, name+".yaml", src)
	}
	for _, tc := range featureCases {
		t.Run(tc.name, func(t *testing.T) {
			p := policies[tc.policy]
			if p == nil {
				t.Fatalf("no policy %q", tc.policy)
			}
			req := policy.Request{Argv: tc.argv, Env: tc.env}
			start := time.Now()
			d := p.DecideExec(tc.s, req)
			if el := time.Since(start); el > 100*time.Millisecond {
				t.Errorf("decision took %v", el)
			}
			if d.Result != tc.result {
				t.Errorf("Result = %v (%.300s), want %v", d.Result, d.Reason, tc.result)
			}
			switch {
			case tc.rule == "" && d.Rule != nil:
				t.Errorf("Rule = %q, want none", d.Rule.Name)
			case tc.rule != "" && d.Rule == nil:
				t.Errorf("Rule = nil, want %q", tc.rule)
			case tc.rule != "" && d.Rule.Name != tc.rule:
				t.Errorf("Rule = %q, want %q", d.Rule.Name, tc.rule)
			}
			if !strings.Contains(d.Reason, tc.reason) {
				t.Errorf("Reason = %.300q, want it to contain %.300q", d.Reason, tc.reason)
			}
			if d.Result == policy.Allow && !strings.HasPrefix(d.Reason, "allowed by rule ") {
				t.Errorf("allow Reason = %q", d.Reason)
			}
			// Reasons quote arguments shortly, however long they are.
			if len(d.Reason) > 2000 {
				t.Errorf("Reason is %d bytes long", len(d.Reason))
			}
			if strings.Join(d.WouldDeny, ",") != strings.Join(tc.would, ",") {
				t.Errorf("WouldDeny = %q, want %q", d.WouldDeny, tc.would)
			}
			checkDecision(t, p, tc.s, req)
		})
	}
}
