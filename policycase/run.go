package policycase

import (
	"fmt"
	"slices"
	"strings"

	"coily.dev/coily/policy"
)

// Outcome is what the policy decided for one case.
type Outcome struct {
	Expect Expect
	// Code is a deny's refusal code.
	Code string
	// Rule is the rule that decided ("" when none did).
	Rule   string
	Reason string
}

func (o Outcome) String() string {
	s := string(o.Expect)
	if o.Code != "" {
		s += " (" + o.Code + ")"
	}
	if o.Rule != "" {
		s += fmt.Sprintf(" by rule %q", o.Rule)
	}
	return s
}

// The refusal codes of a deny (package refusal's).
const (
	codePolicyDeny       = "policy-deny"
	codePermissionDenied = "permission-denied"
)

// Failure is a case whose decision is not the one expected.
type Failure struct {
	Path string
	Case Case
	Got  Outcome
}

func (f Failure) Error() string {
	want := Outcome{Expect: f.Case.Expect, Code: f.Case.Code, Rule: f.Case.Rule}
	return fmt.Sprintf("%s:%d:%d: case %q: expected %s, got %s (%s)", f.Path, f.Case.Line, f.Case.Column, f.Case.Name, want, f.Got, f.Got.Reason)
}

// Decide is the policy's decision on the case's request: as the server
// decides an Exec of its argv and env names by its principal (refused
// with permission-denied before the rules without the exec permission).
// A "local:" principal holds the operator role, as on the local socket;
// the case's roles are held as a tailnet app capability gives them.
func Decide(p *policy.Policy, c Case) Outcome {
	s := policy.Subject{Principal: c.Principal, CapRoles: c.Roles}
	if strings.HasPrefix(c.Principal, "local:") {
		s.Roles = []string{policy.OperatorRole}
	}
	if !p.Allows(s, policy.PermExec) {
		return Outcome{Expect: Deny, Code: codePermissionDenied, Reason: c.Principal + " holds no exec permission"}
	}
	d := p.DecideExec(s, policy.Request{Argv: c.Argv, Env: slices.Sorted(slices.Values(c.Env))})
	o := Outcome{Expect: Deny, Code: codePolicyDeny, Reason: d.Reason}
	if d.Rule != nil {
		o.Rule = d.Rule.Name
	}
	if d.Result == policy.Allow {
		o.Expect, o.Code = Allow, ""
		if d.Confirm != nil {
			// Named by the rule whose approval it waits for, which is
			// the allowing rule's own or an obligation's.
			o.Expect, o.Rule = Confirm, d.Confirm.Name
		}
	}
	return o
}

// Run decides every case of s under p and returns the failures, in file
// order. A case naming a role the policy does not define, or a rule it
// does not have, fails (a typo must not pass as a deny).
func Run(p *policy.Policy, s *Suite) []Failure {
	var out []Failure
	for _, c := range s.Cases {
		got := check(p, c)
		if got.Expect != c.Expect || (c.Rule != "" && got.Rule != c.Rule) || (c.Code != "" && got.Code != c.Code) {
			out = append(out, Failure{Path: s.Path, Case: c, Got: got})
		}
	}
	return out
}

// check decides c, or says which of its names the policy does not know.
func check(p *policy.Policy, c Case) Outcome {
	if c.Rule != "" && !slices.ContainsFunc(p.Rules(), func(r *policy.Rule) bool { return r.Name == c.Rule }) {
		return Outcome{Expect: "error", Reason: fmt.Sprintf("the policy has no rule %q", c.Rule)}
	}
	for _, role := range c.Roles {
		if !p.HasRole(role) {
			return Outcome{Expect: "error", Reason: fmt.Sprintf("the policy defines no role %q", role)}
		}
	}
	return Decide(p, c)
}

// Summary says how a run went, in one line.
func Summary(s *Suite, failures []Failure) string {
	if len(failures) == 0 {
		return fmt.Sprintf("%s: PASS: %d cases", s.Path, len(s.Cases))
	}
	return fmt.Sprintf("%s: FAIL: %d of %d cases", s.Path, len(failures), len(s.Cases))
}
