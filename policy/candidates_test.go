package policy_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"coily.dev/coily/internal/standin"
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

// A request by bare name is decided as the same request by every binary
// the name's rules run: deny rules written for the resolved binary (or
// another link to it) and the tool vetting of what the binary really is
// apply, as they do when the caller writes a path. Before, a name looked
// up only its own rules and vetted by the name: `e -u HOME` and `g -c
// core.sshCommand=… push` were allowed where the paths were refused.
func TestBareNameDecidedAsItsBinaries(t *testing.T) {
	git, err := filepath.EvalSymlinks(standin.Need(t, "git", "apt-get install git"))
	if err != nil {
		t.Fatal(err)
	}
	env, err := filepath.EvalSymlinks("/usr/bin/env")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for name, target := range map[string]string{"e": env, "g": git, "env": env} {
		if err := os.Symlink(target, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	p, err := policy.Parse("bare.yaml", []byte(fmt.Sprintf(`version: 1
roles:
  admin: {permissions: [exec], commands: ["*"]}
grants:
  - {principals: [bob@example.com], roles: [admin]}
commands:
  - {name: env-deny-u, effect: deny, binary: %[1]s, args: ["-u", "**"], reason: no unsetting}
  - {name: other-link-deny, effect: deny, binary: %[2]s/env, args: ["-i", "**"], reason: no clearing}
  - {name: e, binary: %[2]s/e, args: ["**"], flags: any}
  - {name: g, binary: %[2]s/g, args: ["**"], flags: any}
`, env, dir)))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		argv   []string
		result policy.Result
		reason string
	}{
		{[]string{"e", "FOO=1"}, policy.Allow, `allowed by rule "e"`},
		{[]string{"e", "-u", "HOME"}, policy.Deny, `no unsetting (rule "env-deny-u")`},
		{[]string{dir + "/e", "-u", "HOME"}, policy.Deny, `no unsetting (rule "env-deny-u")`},
		{[]string{"e", "-i", "FOO=1"}, policy.Deny, `no clearing (rule "other-link-deny")`},
		{[]string{"g", "status"}, policy.Allow, `allowed by rule "g"`},
		{[]string{"g", "-c", "core.sshCommand=touch /tmp/x", "push"}, policy.Deny, "git option -c"},
		{[]string{dir + "/g", "-c", "core.sshCommand=touch /tmp/x", "push"}, policy.Deny, "git option -c"},
		{[]string{"g", "--exec-path=/tmp", "status"}, policy.Deny, "git option --exec-path"},
	} {
		d := p.DecideExec(policy.Subject{Principal: "bob@example.com"}, policy.Request{Argv: tc.argv})
		if d.Result != tc.result || !strings.Contains(d.Reason, tc.reason) {
			t.Errorf("%q: %v %q; want %v containing %q", tc.argv, d.Result, d.Reason, tc.result, tc.reason)
		}
	}
}

// A dangling link among a rule's candidates (a tool removed from one
// place) is passed over: the next candidate present runs.
func TestCandidateDanglingLinkPassedOver(t *testing.T) {
	dir := t.TempDir()
	if err := os.Symlink(filepath.Join(dir, "gone"), filepath.Join(dir, "env")); err != nil {
		t.Fatal(err)
	}
	p, err := policy.Parse("dangling.yaml", []byte(fmt.Sprintf(`version: 1
commands:
  - {name: env, binary: [%s/env, /usr/bin/env]}
`, dir)))
	if err != nil {
		t.Fatal(err)
	}
	real, _ := filepath.EvalSymlinks("/usr/bin/env")
	if r := p.Rules()[0]; r.Binary != "/usr/bin/env" || r.Resolved != real || r.Absent != nil {
		t.Fatalf("binary %q resolved %q absent %v; want /usr/bin/env", r.Binary, r.Resolved, r.Absent)
	}
}
