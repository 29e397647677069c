package policy_test

import (
	"path/filepath"
	"strings"
	"testing"

	"coily.dev/coily/policy"
)

const candidatesPolicy = `version: 1
roles:
  admin: {permissions: [exec], commands: ["*"]}
grants:
  - {principals: [bob@example.com], roles: [admin]}
commands:
  - name: env-deny-u
    effect: deny
    binary: /nonexistent/coily-test/env
    args: ["-u", "**"]
    reason: no unsetting
  - name: env
    binary: [/nonexistent/coily-test/env, /usr/bin/env, /bin/env]
    args: ["**"]
    flags: any
  - name: env-elsewhere
    binary: [/nonexistent/coily-test/a/env, /nonexistent/coily-test/b/env]
`

// A rule's candidate paths: the first present on this host is its binary;
// a bare name finds the rules of that name, each running its own binary;
// a deny rule written for an absent path still speaks for the name.
func TestBinaryCandidates(t *testing.T) {
	p, err := policy.Parse("candidates.yaml", []byte(candidatesPolicy))
	if err != nil {
		t.Fatal(err)
	}
	rules := p.Rules()
	env := rules[1]
	real, _ := filepath.EvalSymlinks("/usr/bin/env")
	if env.Binary != "/usr/bin/env" || env.Resolved != real || env.Absent != nil || env.Command() != "env" {
		t.Fatalf("env rule: binary %q resolved %q absent %v", env.Binary, env.Resolved, env.Absent)
	}
	if elsewhere := rules[2]; elsewhere.Resolved != "" || elsewhere.Absent == nil ||
		!strings.Contains(elsewhere.Absent.Error(), "none of the binary's candidates") {
		t.Fatalf("env-elsewhere: resolved %q, absent %v", elsewhere.Resolved, elsewhere.Absent)
	}
	for _, tc := range []struct {
		argv   []string
		result policy.Result
		reason string
	}{
		{[]string{"env", "FOO=1"}, policy.Allow, `allowed by rule "env"`},
		{[]string{"/usr/bin/env", "FOO=1"}, policy.Allow, `allowed by rule "env"`},
		{[]string{"env", "-u", "HOME"}, policy.Deny, `no unsetting (rule "env-deny-u")`},
		{[]string{"/nonexistent/coily-test/env", "-u", "X"}, policy.Deny, `no unsetting`},
		{[]string{"printenv"}, policy.Deny, "no rule names a command called printenv"},
		{[]string{"./env"}, policy.Deny, "./env is neither an absolute path nor a command name"},
		{[]string{"env/"}, policy.Deny, "env/ is neither"},
	} {
		d := p.DecideExec(policy.Subject{Principal: "bob@example.com"}, policy.Request{Argv: tc.argv})
		if d.Result != tc.result || !strings.HasPrefix(d.Reason, tc.reason) {
			t.Errorf("%q: %v %q; want %v %q", tc.argv, d.Result, d.Reason, tc.result, tc.reason)
		}
		if d.Result == policy.Allow && d.Rule.Resolved != real {
			t.Errorf("%q: runs %s, want the rule's %s", tc.argv, d.Rule.Resolved, real)
		}
	}
}

func TestIsCommandName(t *testing.T) {
	for _, ok := range []string{"gh", "git", "aws", "python3.11", "clang++", "x-y_z", "_x"} {
		if !policy.IsCommandName(ok) {
			t.Errorf("IsCommandName(%q) = false", ok)
		}
	}
	for _, bad := range []string{"", ".", "..", "./gh", "bin/gh", "/usr/bin/gh", "-gh", "g h", "gh\x00", "gh\n",
		".hidden", "é", "\u2215gh", strings.Repeat("a", 129), "~gh", "$gh"} {
		if policy.IsCommandName(bad) {
			t.Errorf("IsCommandName(%q) = true", bad)
		}
	}
}
