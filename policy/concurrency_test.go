package policy_test

import (
	"testing"

	"coily.dev/coily/policy"
)

func TestConcurrencyCaps(t *testing.T) {
	tests := []struct {
		name, limits, rule     string
		concurrency, perPrinc  int
		ruleConc, rulePerPrinc int
	}{
		{"defaults", "", "", 1, 1, 0, 0},
		{"two slots leave one to others", "{concurrency: 2}", "", 2, 1, 0, 0},
		{"default is every slot but one", "{concurrency: 8}", "", 8, 7, 0, 0},
		{"explicit", "{concurrency: 8, per_principal: 2}", "", 8, 2, 0, 0},
		{"a principal may take every slot", "{concurrency: 3, per_principal: 3}", "", 3, 3, 0, 0},
		{"one with one slot", "{per_principal: 1}", "", 1, 1, 0, 0},
		{"rule per_principal", "{concurrency: 8, per_principal: 4}", "concurrency: 3, per_principal: 2", 8, 4, 3, 2},
		{"rule per_principal up to its concurrency", "{concurrency: 8, per_principal: 4}", "concurrency: 2, per_principal: 2", 8, 4, 2, 2},
		{"rule per_principal up to limits.per_principal", "{concurrency: 8}", "per_principal: 7", 8, 7, 0, 7},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := "version: 1\n"
			if tt.limits != "" {
				src += "limits: " + tt.limits + "\n"
			}
			src += "commands:\n  - {name: echo, binary: /bin/echo"
			if tt.rule != "" {
				src += ", " + tt.rule
			}
			src += "}\n"
			p := parse(t, "caps.yaml", src)
			checkRules(t, p)
			r := p.Rules()[0]
			if p.Concurrency() != tt.concurrency || p.PerPrincipal() != tt.perPrinc ||
				r.Concurrency != tt.ruleConc || r.PerPrincipal != tt.rulePerPrinc {
				t.Fatalf("caps %d/%d, rule %d/%d; want %d/%d, rule %d/%d", p.Concurrency(), p.PerPrincipal(),
					r.Concurrency, r.PerPrincipal, tt.concurrency, tt.perPrinc, tt.ruleConc, tt.rulePerPrinc)
			}
		})
	}
}

// Bad caps are refused with an error naming the place and the cap; the
// broken fixtures (testdata/broken/*per-principal*) hold the messages.
func TestConcurrencyCapsRefused(t *testing.T) {
	for _, src := range []string{
		"version: 1\nlimits: {concurrency: 2, per_principal: 3}\n",
		"version: 1\nlimits: {per_principal: 2}\n",
		"version: 1\nlimits: {concurrency: 4, per_principal: 0}\n",
		"version: 1\nlimits: {concurrency: 4, per_principal: -1}\n",
		"version: 1\nlimits: {concurrency: 4, per_principal: 1025}\n",
		"version: 1\nlimits: {concurrency: 4, per_principal: \"2\"}\n",
		"version: 1\nlimits: {concurrency: 4, per_principal: null}\nnot: valid\n",
		"version: 1\nlimits: {concurrency: 4, per_principal: 9999999999999999999999}\n",
		"version: 1\ncommands:\n  - {name: echo, binary: /bin/echo, per_principal: 2}\n",
		"version: 1\nlimits: {concurrency: 4}\ncommands:\n  - {name: echo, binary: /bin/echo, concurrency: 1, per_principal: 2}\n",
		"version: 1\nlimits: {concurrency: 4}\ncommands:\n  - {name: echo, binary: /bin/echo, per_principal: -3}\n",
		"version: 1\nlimits: {concurrency: 4}\ncommands:\n  - {name: echo, binary: /bin/echo, per_principal: true}\n",
	} {
		if p, err := policy.Parse("caps.yaml", []byte(src)); err == nil {
			t.Errorf("Parse(%q) = %v, want an error", src, p)
		}
	}
}
