package policy_test

import (
	"fmt"
	"strings"
	"testing"

	"coily.dev/coily/policy"
)

// benchBinaries are real binaries, so that every rule resolves.
var benchBinaries = []string{"/bin/true", "/bin/echo", "/bin/sh", "/bin/ls", "/bin/cat"}

// policy200 builds a 200-rule policy: 40 deny rules (args and if_flags,
// gh-like) then 160 allow rules with args and flag maps. With sameBinary,
// every rule names /bin/echo, the binary of the benchmark's requests, so
// that every rule is examined (the worst case); otherwise the rules are
// spread over benchBinaries.
func policy200(tb testing.TB, sameBinary bool) *policy.Policy {
	tb.Helper()
	bin := func(i int) string {
		if sameBinary {
			return "/bin/echo"
		}
		return benchBinaries[i%len(benchBinaries)]
	}
	var b strings.Builder
	b.WriteString(`version: 1
roles:
  all:
    permissions: [exec]
    commands: ["*"]
grants:
  - principals: ["tag:*"]
    roles: [all]
commands:
`)
	for i := range 40 {
		fmt.Fprintf(&b, `  - name: deny-%d
    effect: deny
    binary: %s
    args: [auth%d, "token*", "**"]
`, i, bin(i), i)
		if i%2 == 0 {
			fmt.Fprintf(&b, "    if_flags: [--show-token-%d, -%c]\n", i, 'A'+i%26)
		}
		if i%4 == 0 {
			b.WriteString("    reason: never the token\n")
		}
	}
	for i := range 160 {
		fmt.Fprintf(&b, `  - name: allow-%d
    binary: %s
    args: [issue%d, "create", "*", "**"]
    flags:
      --repo: "org%d/*"
      -R: "org%d/*"
      --title: "*"
      -t: "*"
      --label: [bug, docs, "area/*"]
      --web: true
      -w: true
    env: [NO_COLOR]
`, i, bin(i), i, i, i)
	}
	p := parse(tb, "bench.yaml", b.String())
	if n := len(p.Rules()); n != 200 {
		tb.Fatalf("%d rules", n)
	}
	return p
}

func BenchmarkDecideExec200Rules(b *testing.B) {
	s := policy.Subject{Principal: "tag:agent"}
	last := policy.Request{
		Argv: []string{"/bin/echo", "issue159", "create", "item", "more", "--repo", "org159/x", "-t", "a title",
			"--label=bug", "--label", "area/policy", "-w", "--", "-not-a-flag"},
		Env: []string{"NO_COLOR"},
	}
	none := policy.Request{
		Argv: []string{"/bin/echo", "issue7", "create", "item", "--repo", "elsewhere/x", "--title", "t"},
	}
	for _, tc := range []struct {
		name       string
		sameBinary bool
		req        policy.Request
		want       policy.Result
		rule       string
	}{
		{"last-allow", true, last, policy.Allow, "allow-159"},
		{"no-rule-matches", true, none, policy.Deny, ""},
		{"last-allow/spread", false, last, policy.Allow, "allow-159"},
		{"no-rule-matches/spread", false, none, policy.Deny, ""},
	} {
		b.Run(tc.name, func(b *testing.B) {
			p := policy200(b, tc.sameBinary)
			req := tc.req
			if !tc.sameBinary {
				// The binary of the last allow rule.
				req.Argv = append([]string{benchBinaries[159%len(benchBinaries)]}, req.Argv[1:]...)
			}
			d := p.DecideExec(s, req)
			if d.Result != tc.want || ruleName(d.Rule) != tc.rule || d.WouldDeny != nil {
				b.Fatalf("decision = %v by %q (%.300s), want %v by %q", d.Result, ruleName(d.Rule), d.Reason, tc.want, tc.rule)
			}
			b.ReportAllocs()
			for b.Loop() {
				d = p.DecideExec(s, req)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/1e3, "µs/op")
			if d.Result != tc.want {
				b.Fatal(d.Reason)
			}
		})
	}
}
