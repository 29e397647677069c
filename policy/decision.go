package policy

import (
	"fmt"
	"slices"
)

// Result is the outcome of a decision.
type Result int

// Results. The zero value denies.
const (
	Deny Result = iota
	Allow
)

func (r Result) String() string {
	if r == Allow {
		return "allow"
	}
	return "deny"
}

// Decision is the policy's answer for one request: the result, a reason a
// human can act on, and the rule that matched (nil when none did).
type Decision struct {
	Result Result
	Reason string
	Rule   *Rule
}

// DecideExec decides whether the subject may run argv. The caller has
// already validated argv's shape (non-empty, absolute argv[0]).
func (p *Policy) DecideExec(s Subject, argv []string) Decision {
	if len(argv) == 0 {
		return Decision{Reason: "empty argv"}
	}
	allowed := p.commandsFor(s)
	var denied *Rule
	for _, r := range p.rules {
		if r.Binary != argv[0] {
			continue
		}
		if allowed["*"] || allowed[r.Name] {
			return Decision{Result: Allow, Reason: fmt.Sprintf("rule %q allows %s", r.Name, r.Binary), Rule: r}
		}
		if denied == nil {
			denied = r
		}
	}
	if denied != nil {
		return Decision{Reason: fmt.Sprintf("rule %q matches %s but %s may not use it", denied.Name, argv[0], s.Principal)}
	}
	return Decision{Reason: fmt.Sprintf("no rule allows %s", argv[0])}
}

func (p *Policy) commandsFor(s Subject) map[string]bool {
	out := map[string]bool{}
	for _, name := range p.Roles(s) {
		r, ok := p.roles[name]
		if !ok || !slices.Contains(r.Permissions, PermExec) {
			continue
		}
		for _, c := range r.Commands {
			out[c] = true
		}
	}
	return out
}
