package policy_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"coily.dev/coily/policy"
)

// obligationPolicy is the credentials recipe's broad git rule with an
// owner's force-push rule, in the order given: the force-push rule's
// obligation must bind every force push whichever rule comes first.
func obligationPolicy(t *testing.T, effect string, forceFirst bool) *policy.Policy {
	t.Helper()
	broad := `  - name: git
    binary: /usr/bin/git
    args: ["**"]
    flags: any
`
	force := `  - name: git-push-force
    binary: /usr/bin/git
    args: [push, "**"]
    if_flags: [--force, -f, --force-with-lease, --force-if-includes]
`
	if effect == "confirm" {
		force += "    flags: any\n    confirm: true\n"
	} else {
		force += "    effect: deny\n"
	}
	rules := broad + force
	if forceFirst {
		rules = force + broad
	}
	return parse(t, "obligation.yaml", `version: 1
roles:
  agent:
    permissions: [exec]
    commands: [git]
grants:
  - principals: ["tag:agent"]
    roles: [agent]
commands:
`+rules)
}

// forcePushes are the spellings of a force push an owner's rule must
// catch (issue 25).
var forcePushes = [][]string{
	{"push", "-f", "-v", "origin", "main"},
	{"push", "--force", "--quiet", "origin", "main"},
	{"push", "--mirror", "origin"},
	{"push", "--mirr", "origin"},
	{"push", "--m", "origin"}, // git takes one letter when no other option starts so
	{"push", "--mi", "origin"},
	{"push", "--m=x", "origin"},
	{"push", "--force-with-lease", "origin", "main"},
	{"push", "--force-with-lease=main:abc", "origin", "main"},
	{"push", "--force-if-includes", "origin", "main"},
	{"push", "origin", "+main"},
	{"push", "origin", "+main:main"},
	{"push", "origin", "--", "+main"},
	{"push", "--", "origin", "+main"},
	{"push", "-fv", "origin", "main"},
	{"push", "-vf", "origin", "main"},
	{"push", "-qfv", "origin", "main"},
	{"push", "--force=yes", "origin", "main"},
	{"push", "--forc", "origin", "main"},
	{"push", "--for", "origin", "main"},
	{"push", "origin", "main", "--force"},
	{"push", "origin", "main", "-f"},
	{"--no-pager", "push", "-f", "origin", "main"},
	{"push", "-o", "ci.skip", "-f", "origin", "main"},
}

// plainPushes are not forced: the obligation leaves them alone.
var plainPushes = [][]string{
	{"push", "origin", "main"},
	{"push", "-v", "origin", "main"},
	{"push", "--quiet", "origin", "main"},
	{"push", "--no-force", "origin", "main"},
	{"push", "origin", "main:main"},
	{"status"},
}

func TestObligationConfirmWhicheverRuleAllows(t *testing.T) {
	agent := policy.Subject{Principal: "tag:agent"}
	for _, forceFirst := range []bool{false, true} {
		p := obligationPolicy(t, "confirm", forceFirst)
		for _, args := range forcePushes {
			t.Run(fmt.Sprintf("first=%v/%q", forceFirst, args), func(t *testing.T) {
				d := p.DecideExec(agent, policy.Request{Argv: append([]string{"/usr/bin/git"}, args...)})
				if d.Result != policy.Allow || d.Confirm == nil || d.Confirm.Name != "git-push-force" {
					t.Fatalf("git %q: %v, confirm %v (%s); want allowed with rule git-push-force's approval", args, d.Result, d.Confirm, d.Reason)
				}
			})
		}
		for _, args := range plainPushes {
			d := p.DecideExec(agent, policy.Request{Argv: append([]string{"/usr/bin/git"}, args...)})
			if d.Result != policy.Allow || d.Confirm != nil {
				t.Errorf("first=%v git %q: %v, confirm %v (%s); want allowed without approval", forceFirst, args, d.Result, d.Confirm, d.Reason)
			}
		}
	}
}

func TestObligationDenyWhicheverRuleAllows(t *testing.T) {
	agent := policy.Subject{Principal: "tag:agent"}
	for _, forceFirst := range []bool{false, true} {
		p := obligationPolicy(t, "deny", forceFirst)
		for _, args := range forcePushes {
			d := p.DecideExec(agent, policy.Request{Argv: append([]string{"/usr/bin/git"}, args...)})
			if d.Result != policy.Deny || d.Rule == nil || d.Rule.Name != "git-push-force" {
				t.Errorf("first=%v git %q: %v by %v (%s); want denied by git-push-force", forceFirst, args, d.Result, d.Rule, d.Reason)
			}
		}
		for _, args := range plainPushes {
			if d := p.DecideExec(agent, policy.Request{Argv: append([]string{"/usr/bin/git"}, args...)}); d.Result != policy.Allow {
				t.Errorf("first=%v git %q: %v (%s); want allowed", forceFirst, args, d.Result, d.Reason)
			}
		}
	}
}

// A confirm rule binds requests of principals who may not use it, and by
// the bare command name.
func TestObligationBindsEveryone(t *testing.T) {
	p := obligationPolicy(t, "confirm", false)
	d := p.DecideExec(policy.Subject{Principal: "tag:agent"}, policy.Request{Argv: []string{"git", "push", "-f", "origin", "main"}})
	if d.Result != policy.Allow || d.Confirm == nil {
		t.Fatalf("bare git push -f: %v confirm %v (%s)", d.Result, d.Confirm, d.Reason)
	}
}

// A confirm rule without if_flags binds what its positionals name; one
// without args binds requests without positionals, as it allows.
func TestObligationPositionals(t *testing.T) {
	p := parse(t, "echo.yaml", `version: 1
roles:
  agent: {permissions: [exec], commands: [echo]}
grants:
  - {principals: ["tag:agent"], roles: [agent]}
commands:
  - {name: echo, binary: /bin/echo, args: ["**"], flags: any}
  - {name: confirm-echo, binary: /bin/echo, args: [confirm, "**"], confirm: true}
  - {name: bare-echo, binary: /bin/echo, confirm: true}
`)
	agent := policy.Subject{Principal: "tag:agent"}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"confirm", "x"}, "confirm-echo"},
		{[]string{"-n", "confirm", "x"}, "confirm-echo"},
		{[]string{"-e", "--", "confirm"}, "confirm-echo"},
		{[]string{"hello"}, ""},
		{[]string{"-n", "hello"}, "bare-echo"}, // -n's value, in one reading
		{nil, "bare-echo"},
		{[]string{"-n"}, "bare-echo"},
	} {
		d := p.DecideExec(agent, policy.Request{Argv: append([]string{"/bin/echo"}, tc.args...)})
		got := ""
		if d.Confirm != nil {
			got = d.Confirm.Name
		}
		if d.Result != policy.Allow || got != tc.want {
			t.Errorf("echo %q: %v, confirm %q (%s); want allowed, confirm %q", tc.args, d.Result, got, d.Reason, tc.want)
		}
	}
}

// An allow rule's if_flags requires one of its flags in the reading it
// admits.
func TestAllowIfFlagsRequired(t *testing.T) {
	spec := policy.ArgSpec{Args: []string{"push", "**"}, Flags: map[string]policy.FlagSpec{
		"--dry-run": {Bool: true}, "-n": {Bool: true}, "-v": {Bool: true}, "--repo": {Values: []string{"*"}},
	}, IfFlags: []string{"--dry-run", "-n"}}
	if err := spec.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		ok   bool
	}{
		{[]string{"push", "--dry-run", "origin"}, true},
		{[]string{"push", "-vn", "origin"}, true},
		{[]string{"push", "origin", "-n"}, true},
		{[]string{"push", "origin"}, false},
		{[]string{"push", "-v", "origin"}, false},
		{[]string{"push", "--repo", "--dry-run", "origin"}, false}, // a value
		{[]string{"push", "--", "--dry-run"}, false},               // a positional
		{[]string{"push", "--dry-run=x"}, false},
		{[]string{"push", "--dry"}, false},
	} {
		if ok, why := spec.MatchAllow(tc.args); ok != tc.ok {
			t.Errorf("MatchAllow(%q) = %v (%s), want %v", tc.args, ok, why, tc.ok)
		}
	}
}

// obligationWarnings returns the check's warnings about the policy's
// obligations.
func obligationWarnings(t *testing.T, src string) []string {
	t.Helper()
	var out []string
	for _, w := range parse(t, "check.yaml", src).Warnings() {
		if strings.Contains(w.Msg, "approval of requests the earlier rule") || strings.Contains(w.Msg, "coily reads the arguments otherwise") {
			out = append(out, w.Msg)
		}
	}
	return out
}

func TestCheckObligations(t *testing.T) {
	const head = "version: 1\ncommands:\n"
	const broad = "  - {name: git, binary: /usr/bin/git, args: [\"**\"], flags: any}\n"
	const pushFirst = "  - {name: git-push, binary: /usr/bin/git, args: [push, \"**\"], flags: {-u: true, --quiet: true}}\n"
	for _, tc := range []struct {
		name, rules, want string
	}{
		// Before obligations, git-push-force (placed after the broad rule)
		// only saw the force pushes git did not admit: none.
		{"meaning changed", broad + "  - {name: git-push-force, binary: /usr/bin/git, args: [push, \"**\"], flags: {--force: true, -f: true}, confirm: true}\n",
			`rule "git-push-force" now also asks for an approval of requests the earlier rule "git" (line 3) allows, such as "git push"`},
		{"meaning changed, if_flags", pushFirst + broad + "  - {name: git-push-force, binary: /usr/bin/git, args: [push, \"**\"], if_flags: [-f], flags: {-f: true}, confirm: true}\n",
			`the earlier rule "git" (line 4) allows, such as "git push -f"`},
		{"confirm rule first", "  - {name: git-push-force, binary: /usr/bin/git, args: [push, \"**\"], if_flags: [--force, -f], flags: {--force: true, -f: true}, confirm: true}\n" + broad, ""},
		{"no overlap", pushFirst + "  - {name: git-push-force, binary: /usr/bin/git, args: [push, \"**\"], if_flags: [--force, -f], flags: {--force: true, -f: true}, confirm: true}\n", ""},
		// The deny rule names "+x" as written; coily reads it as --force.
		{"deny rule on the raw form", broad + "  - {name: no-plus, effect: deny, binary: /usr/bin/git, args: [push, \"*\", \"+*\"]}\n",
			`rule "git" (line 3) allows "git push x +x", which rule "no-plus" names, without "no-plus" applying`},
		{"deny rule as coily reads it", broad + "  - {name: no-force, effect: deny, binary: /usr/bin/git, args: [push, \"**\"], if_flags: [--force, -f]}\n", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := obligationWarnings(t, head+tc.rules)
			if tc.want == "" {
				if len(got) != 0 {
					t.Fatalf("warnings %q, want none", got)
				}
				return
			}
			if len(got) != 1 || !strings.Contains(got[0], tc.want) {
				t.Fatalf("warnings %q, want one containing %q", got, tc.want)
			}
		})
	}
}

// An allow rule that requires a flag shadows nothing after it.
func TestIfFlagsRuleShadowsNothing(t *testing.T) {
	p := parse(t, "shadow.yaml", `version: 1
commands:
  - {name: echo-n, binary: /bin/echo, args: ["**"], flags: {-n: true, -e: true}, if_flags: [-n]}
  - {name: echo-hi, binary: /bin/echo, args: [hi]}
`)
	for _, w := range p.Warnings() {
		if strings.Contains(w.Msg, "can never match") {
			t.Errorf("warning %q", w.Msg)
		}
	}
}

// TestCheckObligationsBounded: the check weighs pairs of rules, each
// request against every rule, so a large policy of push rules took minutes
// (150 allow and 150 confirm rules: about 35 minutes, on every reload). It
// stops at its budget and says where.
func TestCheckObligationsBounded(t *testing.T) {
	var b strings.Builder
	b.WriteString("version: 1\ncommands:\n")
	for i := range 150 {
		fmt.Fprintf(&b, "  - {name: push-%d, binary: /usr/bin/git, args: [push, origin, \"b%d-*\"], flags: {-q: true, -v: true}}\n", i, i)
		fmt.Fprintf(&b, "  - {name: force-%d, binary: /usr/bin/git, args: [push, \"**\"], if_flags: [--force, -f], flags: any, confirm: true}\n", i)
	}
	p := parse(t, "big.yaml", b.String())
	done := make(chan []policy.Warning, 1)
	go func() { done <- p.Warnings() }()
	select {
	case ws := <-done:
		stopped := false
		for _, w := range ws {
			stopped = stopped || strings.Contains(w.Msg, "and no further")
		}
		if !stopped {
			t.Errorf("no warning says the check stopped at its budget (%d warnings)", len(ws))
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("policy check of 300 push rules still running after 2 minutes")
	}
}

// TestObligationConfigMayForce: where a rule may write .git/config, a
// command can put `push = +refs/heads/*:refs/heads/*` or `mirror = true`
// under the remote, and a push naming no refspec then forces without a
// flag: such a push needs the force rule's approval. A push naming its
// refspecs reads no pushing configuration and is left alone; without a
// writable config nothing changes.
func TestObligationConfigMayForce(t *testing.T) {
	ws := t.TempDir()
	src := func(writable string) string {
		return `version: 1
workspaces: {ws: ` + ws + `}
roles: {agent: {permissions: [exec], commands: [git, git-push-force]}}
grants: [{principals: ["tag:agent"], roles: [agent]}]
commands:
  - {name: git-push-force, binary: /usr/bin/git, args: [push, "**"], if_flags: [--force, -f], flags: any, confirm: true}
  - {name: git, binary: /usr/bin/git, args: ["**"], flags: any, workspace: ws, writable: [` + writable + `]}
`
	}
	writable, plain := parse(t, "w.yaml", src(".git, .git/config")), parse(t, "p.yaml", src(".git"))
	for _, tc := range []struct {
		args    []string
		confirm bool // where .git/config is writable
	}{
		{[]string{"push"}, true},
		{[]string{"push", "origin"}, true},
		{[]string{"push", "-q", "origin"}, true},
		{[]string{"push", "origin", "--"}, true},
		{[]string{"push", "-o", "ci.skip", "origin"}, true},
		{[]string{"push", "-o", "ci.skip", "origin", "main"}, true}, // which word is the refspec?
		{[]string{"push", "-qo", "ci.skip", "origin", "main"}, true},
		{[]string{"push", "--push-option", "x", "origin", "main"}, true},
		{[]string{"push", "--repo", "origin", "main"}, true},
		{[]string{"push", "origin", "main"}, false},
		{[]string{"push", "-u", "origin", "main"}, false},
		{[]string{"push", "origin", "--", "main"}, false},
		{[]string{"push", "--push-option=x", "origin", "main"}, false},
		{[]string{"push", "--all", "origin"}, false},
		{[]string{"push", "--tags", "origin"}, false},
		{[]string{"status"}, false},
	} {
		argv := append([]string{"/usr/bin/git"}, tc.args...)
		sub := policy.Subject{Principal: "tag:agent"}
		if d := writable.DecideExec(sub, policy.Request{Argv: argv}); d.Result != policy.Allow || (d.Confirm != nil) != tc.confirm {
			t.Errorf("writable config: %q = %v confirm %v (%s), want allowed, confirm %v", tc.args, d.Result, d.Confirm != nil, d.Reason, tc.confirm)
		}
		if d := plain.DecideExec(sub, policy.Request{Argv: argv}); d.Result != policy.Allow || d.Confirm != nil {
			t.Errorf("read-only config: %q = %v confirm %v (%s), want allowed without approval", tc.args, d.Result, d.Confirm != nil, d.Reason)
		}
	}
}
