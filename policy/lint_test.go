package policy_test

import (
	"strings"
	"testing"

	"coily.dev/coily/policy"
)

const lintPolicy = `version: 1
roles:
  agent: {permissions: [exec], commands: [echo-any, echo-hi, cat-any, true-any]}
  owner: {permissions: [exec], commands: ["*"]}
  reader: {permissions: [exec], commands: [cat-one]}
grants:
  - {principals: ["tag:agent"], roles: [agent]}
commands:
  - name: echo-any
    binary: /bin/echo
    args: ["**"]
    flags: any
  - name: echo-hi
    binary: /usr/bin/echo
    args: [hi]
  - name: cat-any
    binary: /bin/cat
    args: ["**"]
    flags: any
  - name: cat-one
    binary: /bin/cat
    args: [one]
  - name: true-deny-all
    effect: deny
    binary: /bin/true
  - name: true-any
    binary: /bin/true
    args: ["**"]
  - name: gh-offline
    binary: [/nonexistent/coily-test/gh]
    args: ["**"]
  - name: echo-env
    binary: /bin/echo
    args: ["**"]
    flags: any
    env: [NO_COLOR]
`

// policy check's warnings: a rule an earlier catch-all rule shadows for
// every role that may use it (not one some role reaches only through its
// own grant), a rule a deny-all rule makes unreachable, a network tool
// with network deny, a missing binary.
func TestWarnings(t *testing.T) {
	p, err := policy.Parse("lint.yaml", []byte(lintPolicy))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]string{}
	for _, w := range p.Warnings() {
		got[w.Rule] = append(got[w.Rule], w.Msg)
	}
	want := map[string][]string{
		"echo-hi":    {`rule "echo-hi" can never match through a role: rule "echo-any" (line 9)`},
		"true-any":   {`rule "true-any" can never match: deny rule "true-deny-all" (line 23) refuses every request for true`},
		"gh-offline": {`rule "gh-offline" cannot match on this host`, `rule "gh-offline" runs gh with network deny`},
	}
	for rule, msgs := range want {
		if len(got[rule]) != len(msgs) {
			t.Errorf("%s: warnings %q, want %d", rule, got[rule], len(msgs))
			continue
		}
		for i, m := range msgs {
			if !strings.HasPrefix(got[rule][i], m) {
				t.Errorf("%s: warning %q, want prefix %q", rule, got[rule][i], m)
			}
		}
	}
	for rule := range got {
		if want[rule] == nil {
			// cat-one: the reader role reaches it without cat-any;
			// echo-env: it lets NO_COLOR through, echo-any does not.
			t.Errorf("%s: unexpected warnings %q", rule, got[rule])
		}
	}
}

func TestWarningGitHubAppTimeout(t *testing.T) {
	p, err := policy.Parse("p.yaml", []byte(`version: 1
commands:
  - name: gh
    binary: /bin/sh
    args: ["**"]
    timeout: 2h
    github_app: {app_id: 1, installation_id: 2, private_key: "file:k", permissions: {issues: write}, repository: a/b, env: GH_TOKEN}
`))
	if err != nil {
		t.Fatal(err)
	}
	w := p.Warnings()
	if len(w) != 1 || !strings.Contains(w[0].Msg, "expires within an hour") {
		t.Fatalf("warnings %+v", w)
	}
}
