package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const testedPolicy = `version: 1
roles:
  agent: {permissions: [exec], commands: [confirm-echo, echo]}
grants:
  - {principals: ["tag:agent"], roles: [agent]}
commands:
  - {name: no-secret, effect: deny, binary: /bin/echo, args: [secret, "**"]}
  - {name: confirm-echo, binary: /bin/echo, args: [confirm, "**"], confirm: true}
  - {name: echo, binary: /bin/echo, args: ["**"], flags: any}
`

const passingTests = `version: 1
cases:
  - {name: agent echoes, principal: tag:agent, argv: [echo, hi], expect: allow, rule: echo}
  - {name: confirm waits, principal: tag:agent, argv: [echo, confirm, x], expect: confirm, rule: confirm-echo}
  - {name: no secret, principal: tag:agent, argv: [echo, secret], expect: deny, rule: no-secret}
  - {name: stranger, principal: tag:stranger, argv: [echo, hi], expect: deny, code: permission-denied}
`

// coily policy test and coily policy check --tests: exit 0 when every
// case passes, 1 with each failure named when one does not, 1 for a
// tests file that cannot be read, 2 for a tests file not named for a
// policy without --policy.
func TestCLIPolicyTest(t *testing.T) {
	dir := t.TempDir()
	pol, tests := filepath.Join(dir, "p.yaml"), filepath.Join(dir, "p.tests.yaml")
	write := func(path, data string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(pol, testedPolicy)
	write(tests, passingTests)
	if r := runCoily(t, nil, "policy", "test", tests); r.code != 0 || !strings.Contains(r.stdout, "p.tests.yaml: PASS: 4 cases") {
		t.Fatalf("passing tests: %+v", r)
	}
	if r := runCoily(t, nil, "policy", "check", "--tests", pol); r.code != 0 || !strings.Contains(r.stdout, ": OK: 3 rules") || !strings.Contains(r.stdout, "PASS: 4 cases") {
		t.Fatalf("check --tests, passing: %+v", r)
	}
	// A wrong expectation: both fail, naming the case, what was expected,
	// what was got, and the rule that decided.
	write(tests, strings.Replace(passingTests, "argv: [echo, secret], expect: deny, rule: no-secret", "argv: [echo, secret], expect: allow, rule: echo", 1))
	want := `p.tests.yaml:5:5: case "no secret": expected allow by rule "echo", got deny (policy-deny) by rule "no-secret"`
	for _, args := range [][]string{{"policy", "test", tests}, {"policy", "test", "--policy", pol, tests}, {"policy", "check", "--tests", pol}, {"policy", "check", "--tests-file", tests, pol}} {
		if r := runCoily(t, nil, args...); r.code != 1 || !strings.Contains(r.stdout, want) || !strings.Contains(r.stdout, "FAIL: 1 of 4 cases") {
			t.Errorf("%v, failing: %+v", args, r)
		}
	}
	r := runCoily(t, nil, "policy", "check", "--json", "--tests", pol)
	var out struct {
		OK    bool `json:"ok"`
		Tests struct {
			Failures []map[string]any `json:"failures"`
		} `json:"tests"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil || r.code != 1 || out.OK || len(out.Tests.Failures) != 1 || out.Tests.Failures[0]["got_rule"] != "no-secret" {
		t.Errorf("check --json --tests, failing: %v %+v", err, r)
	}
	// Without --tests, check does not read them.
	if r := runCoily(t, nil, "policy", "check", pol); r.code != 0 {
		t.Errorf("check without --tests: %+v", r)
	}
	write(tests, "version: 1\ncases:\n  - {name: a, principal: p, argv: [x], expect: deny, cwd: /}\n")
	if r := runCoily(t, nil, "policy", "test", tests); r.code != 1 || !strings.Contains(r.stderr, `p.tests.yaml:3:54: case: unknown key "cwd"`) {
		t.Errorf("invalid tests: %+v", r)
	}
	if r := runCoily(t, nil, "policy", "check", "--tests", filepath.Join(dir, "missing.yaml")); r.code != 1 {
		t.Errorf("check --tests of a missing policy: %+v", r)
	}
	write(pol+".bak", testedPolicy)
	if r := runCoily(t, nil, "policy", "check", "--tests", pol+".bak"); r.code != 1 || !strings.Contains(r.stderr, "no such file") {
		t.Errorf("check --tests without a tests file: %+v", r)
	}
	if r := runCoily(t, nil, "policy", "test", pol); r.code != 2 || !strings.Contains(r.stderr, "--policy") {
		t.Errorf("test of a file not named .tests.yaml: %+v", r)
	}
}
