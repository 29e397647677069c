package policycase

import (
	"strings"
	"testing"

	"coily.dev/coily/policy"
)

const testPolicy = `version: 1
roles:
  agent: {permissions: [exec], commands: [confirm-echo, echo]}
  dev: {permissions: [exec], commands: [env]}
  operator: {permissions: [exec], commands: [env]}
grants:
  - {principals: ["tag:agent"], roles: [agent]}
commands:
  - {name: no-secret, effect: deny, binary: /bin/echo, args: [secret, "**"]}
  - {name: confirm-echo, binary: /bin/echo, args: [confirm, "**"], confirm: true}
  - {name: echo, binary: /bin/echo, args: ["**"], flags: any}
  - {name: env, binary: /usr/bin/env, env: [GH_REPO]}
  - {name: confirm-late, binary: /bin/echo, args: [late, "**"], confirm: true}
`

func TestRun(t *testing.T) {
	p, err := policy.Parse("p.yaml", []byte(testPolicy))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		c    Case
		fail string // "" when the case passes
	}{
		{"allow", Case{Principal: "tag:agent", Argv: []string{"echo", "hi"}, Expect: Allow, Rule: "echo"}, ""},
		{"allow by the wrong rule", Case{Principal: "tag:agent", Argv: []string{"echo", "hi"}, Expect: Allow, Rule: "confirm-echo"},
			`expected allow by rule "confirm-echo", got allow by rule "echo" (allowed by rule "echo")`},
		{"confirm", Case{Principal: "tag:agent", Argv: []string{"echo", "confirm", "x"}, Expect: Confirm, Rule: "confirm-echo"}, ""},
		{"confirm expected, allowed", Case{Principal: "tag:agent", Argv: []string{"echo", "x"}, Expect: Confirm, Rule: "echo"},
			`expected confirm by rule "echo", got allow by rule "echo"`},
		{"allow expected, confirm", Case{Principal: "tag:agent", Argv: []string{"echo", "confirm"}, Expect: Allow, Rule: "confirm-echo"},
			`expected allow by rule "confirm-echo", got confirm by rule "confirm-echo"`},
		{"confirm by a later rule", Case{Principal: "tag:agent", Argv: []string{"echo", "late", "x"}, Expect: Confirm, Rule: "confirm-late"}, ""},
		{"confirm by a later rule, allow expected", Case{Principal: "tag:agent", Argv: []string{"echo", "late"}, Expect: Allow, Rule: "echo"},
			`expected allow by rule "echo", got confirm by rule "confirm-late"`},
		{"deny by rule", Case{Principal: "tag:agent", Argv: []string{"echo", "secret"}, Expect: Deny, Rule: "no-secret"}, ""},
		{"deny, any", Case{Principal: "tag:agent", Argv: []string{"echo", "secret"}, Expect: Deny}, ""},
		{"deny by no rule", Case{Principal: "tag:stranger", Argv: []string{"echo", "hi"}, Expect: Deny}, ""},
		{"no exec permission", Case{Principal: "tag:stranger", Argv: []string{"echo", "hi"}, Expect: Deny, Code: codePermissionDenied}, ""},
		{"no exec permission, policy-deny expected", Case{Principal: "tag:stranger", Argv: []string{"echo", "hi"}, Expect: Deny, Code: codePolicyDeny},
			`expected deny (policy-deny), got deny (permission-denied) (tag:stranger holds no exec permission)`},
		{"denied by the rules", Case{Principal: "tag:agent", Argv: []string{"echo", "secret"}, Expect: Deny, Code: codePolicyDeny, Rule: "no-secret"}, ""},
		{"denied by the rules, permission-denied expected", Case{Principal: "tag:agent", Argv: []string{"echo", "secret"}, Expect: Deny, Code: codePermissionDenied},
			`expected deny (permission-denied), got deny (policy-deny) by rule "no-secret"`},
		{"deny expected, allowed", Case{Principal: "tag:agent", Argv: []string{"echo", "hi"}, Expect: Deny},
			`expected deny, got allow by rule "echo"`},
		{"role", Case{Principal: "tag:x", Roles: []string{"dev"}, Argv: []string{"env"}, Env: []string{"GH_REPO"}, Expect: Allow, Rule: "env"}, ""},
		{"env not allowed", Case{Principal: "tag:x", Roles: []string{"dev"}, Argv: []string{"env"}, Env: []string{"AWS_SECRET"}, Expect: Deny}, ""},
		{"local operator", Case{Principal: "local:alice", Argv: []string{"env"}, Expect: Allow, Rule: "env"}, ""},
		{"unknown rule", Case{Principal: "tag:agent", Argv: []string{"echo", "secret"}, Expect: Deny, Rule: "no-secrets"}, `the policy has no rule "no-secrets"`},
		{"unknown role", Case{Principal: "tag:x", Roles: []string{"devs"}, Argv: []string{"env"}, Expect: Deny}, `the policy defines no role "devs"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.c.Name, c.c.Line, c.c.Column = c.name, 3, 5
			f := Run(p, &Suite{Path: "t.tests.yaml", Cases: []Case{c.c}})
			switch {
			case c.fail == "" && len(f) > 0:
				t.Fatalf("failed: %v", f[0])
			case c.fail != "" && len(f) == 0:
				t.Fatalf("passed, want %q", c.fail)
			case c.fail != "":
				msg := f[0].Error()
				if !strings.HasPrefix(msg, `t.tests.yaml:3:5: case "`+c.name+`": `) || !strings.Contains(msg, c.fail) {
					t.Errorf("failure %q, want %q", msg, c.fail)
				}
			}
		})
	}
}

func TestBesidePath(t *testing.T) {
	for in, want := range map[string]string{"/etc/coily/policy.yaml": "/etc/coily/policy.tests.yaml", "p.yml": "p.tests.yaml", "policy": "policy.tests.yaml"} {
		if got := BesidePath(in); got != want {
			t.Errorf("BesidePath(%q) = %q, want %q", in, got, want)
		}
	}
	if _, err := PolicyBeside("x.yaml"); err == nil {
		t.Error("PolicyBeside(x.yaml) found a policy")
	}
	if got, err := PolicyBeside("d/p.tests.yaml"); err != nil || got != "d/p.yaml" {
		t.Errorf("PolicyBeside = %q, %v", got, err)
	}
}
