package policy

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A rule is the same after a reload that only moved it; any change to
// what it allows or how it runs makes it another.
func TestRuleSameAs(t *testing.T) {
	const base = `version: 1
roles:
  agent: {permissions: [exec], commands: ["*"]}
grants:
  - {principals: ["tag:agent"], roles: [agent]}
commands:
  - {name: push, binary: /bin/echo, args: [push, "**"], flags: any, sandbox: native, confirm: true}
`
	load := func(text string) *Rule {
		t.Helper()
		path := filepath.Join(t.TempDir(), "policy.yaml")
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		p, err := Load(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range p.Rules() {
			if r.Name == "push" {
				return r
			}
		}
		t.Fatal("no rule push")
		return nil
	}
	r := load(base)
	if !r.SameAs(load(base)) {
		t.Fatal("the same file: not the same rule")
	}
	moved := strings.Replace(base, "commands:\n", "commands:\n  - {name: other, binary: /bin/true, sandbox: native}\n", 1)
	if !r.SameAs(load(moved)) {
		t.Fatal("moved down a line: not the same rule")
	}
	for name, changed := range map[string]string{
		"args":     strings.Replace(base, `[push, "**"]`, `["**"]`, 1),
		"network":  strings.Replace(base, "sandbox: native", "sandbox: native, network: open", 1),
		"timeout":  strings.Replace(base, "confirm: true", "confirm: true, timeout: 1h", 1),
		"no check": strings.Replace(base, ", confirm: true", "", 1),
	} {
		if r.SameAs(load(changed)) {
			t.Errorf("%s changed: still the same rule", name)
		}
	}
}
