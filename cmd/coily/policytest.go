package main

import (
	"context"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"coily.dev/coily/cli"
	"coily.dev/coily/policy"
	"coily.dev/coily/policycase"
)

func policyTestCmd(a *cli.App) *cobra.Command {
	return command(a, spec{use: "test FILE", short: "run a policy's tests: each case's request must get the decision it names", args: cobra.ExactArgs(1),
		example: "  coily policy test /etc/coily/policy.tests.yaml",
		flags: func(fs *pflag.FlagSet) runFunc {
			path := stringFlag(fs, "policy", "COILY_POLICY", "", "policy file (default: FILE without .tests.yaml, with .yaml)")
			asJSON := boolFlag(fs, "json", "COILY_JSON", "print the result (cases, failures) as JSON")
			return func(_ context.Context, e *env) int { return policyTest(e, e.args[0], *path, *asJSON) }
		}})
}

// policyTest runs the tests file against a policy: each failure printed,
// exit 1 when any case fails or either file cannot be read.
func policyTest(e *env, file, path string, asJSON bool) int {
	if path == "" {
		var err error
		if path, err = policycase.PolicyBeside(file); err != nil {
			return usage(e, "%v", err)
		}
	}
	p, err := policy.Load(path)
	if err != nil {
		return testError(e, err, asJSON)
	}
	return runPolicyTests(e, p, file, asJSON)
}

// runPolicyTests runs the tests file against p and prints the result:
// each failure (the case, the decision expected and the one got, with
// the rule that decided and its reason), then a summary line.
func runPolicyTests(e *env, p *policy.Policy, file string, asJSON bool) int {
	s, err := policycase.Load(file)
	if err != nil {
		return testError(e, err, asJSON)
	}
	failures := policycase.Run(p, s)
	if asJSON {
		printJSON(e.stdout, testsJSON(p, s, failures))
	} else {
		for _, f := range failures {
			printLine(e.stdout, "%v", f)
		}
		printLine(e.stdout, "%s", policycase.Summary(s, failures))
	}
	if len(failures) > 0 {
		return 1
	}
	return 0
}

func testError(e *env, err error, asJSON bool) int {
	if asJSON {
		printJSON(e.stdout, map[string]any{"ok": false, "error": err.Error()})
	} else {
		printLine(e.stderr, "%v", err)
	}
	return 1
}

type failureJSON struct {
	Case         string `json:"case"`
	Line         int    `json:"line"`
	Column       int    `json:"column"`
	Expected     string `json:"expected"`
	ExpectedCode string `json:"expected_code,omitempty"`
	ExpectedRule string `json:"expected_rule,omitempty"`
	Got          string `json:"got"`
	GotCode      string `json:"got_code,omitempty"`
	GotRule      string `json:"got_rule,omitempty"`
	Reason       string `json:"reason"`
}

func testsJSON(p *policy.Policy, s *policycase.Suite, failures []policycase.Failure) map[string]any {
	out := []failureJSON{}
	for _, f := range failures {
		out = append(out, failureJSON{Case: f.Case.Name, Line: f.Case.Line, Column: f.Case.Column, Expected: string(f.Case.Expect),
			ExpectedCode: f.Case.Code, ExpectedRule: f.Case.Rule, Got: string(f.Got.Expect), GotCode: f.Got.Code, GotRule: f.Got.Rule, Reason: f.Got.Reason})
	}
	return map[string]any{"ok": len(failures) == 0, "path": s.Path, "policy": p.Path, "policy_sha256": p.SHA256, "cases": len(s.Cases), "failures": out}
}

// checkTestsJSON is the result of the tests in file under p, as `policy
// check --json` reports it, and the exit code.
func checkTestsJSON(p *policy.Policy, file string) (map[string]any, int) {
	s, err := policycase.Load(file)
	if err != nil {
		return map[string]any{"ok": false, "error": err.Error()}, 1
	}
	failures := policycase.Run(p, s)
	if len(failures) > 0 {
		return testsJSON(p, s, failures), 1
	}
	return testsJSON(p, s, failures), 0
}
