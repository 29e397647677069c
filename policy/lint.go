package policy

import (
	"fmt"
	"slices"
	"strings"
)

// Warning is something `coily policy check` reports about a valid policy:
// a rule that can never match, one whose binary is missing on this host,
// a rule whose network setting and tool do not fit together.
type Warning struct {
	Rule string // the rule it is about
	Line int    // the rule's line
	Msg  string
}

// Warnings lists what a careful owner would want to know about the
// policy, rule by rule in file order.
func (p *Policy) Warnings() []Warning {
	var out []Warning
	for i, r := range p.rules {
		warn := func(format string, a ...any) {
			out = append(out, Warning{Rule: r.Name, Line: r.Line, Msg: fmt.Sprintf(format, a...)})
		}
		if r.Absent != nil {
			warn("rule %q cannot match on this host: %v", r.Name, r.Absent)
		}
		if r.Effect != Allow {
			continue
		}
		if by := p.shadowedBy(i); by != nil {
			if by.Effect == Deny {
				warn("rule %q can never match: deny rule %q (line %d) refuses every request for %s", r.Name, by.Name, by.Line, r.Command())
			} else {
				warn("rule %q can never match through a role: rule %q (line %d) comes first and allows every request it would, for every role that may use it", r.Name, by.Name, by.Line)
			}
		}
		for _, w := range r.sectionWarnings() {
			warn("%s", w)
		}
		for _, w := range r.Egress.Unreachable() {
			warn("rule %q: %s", r.Name, w)
		}
		for _, n := range r.Writable {
			if strings.HasPrefix(n, ".git/") && !slices.Contains(r.Writable, ".git") {
				warn("rule %q may write %s but not .git: the entries of a git directory are writable only inside a writable one (and git writes them by a lock file beside them), so %s stays read-only; add .git to writable", r.Name, n, n)
			}
		}
		if r.Network == NetworkDeny && networkTools[r.Command()] {
			warn("rule %q runs %s with network deny: it cannot reach any host (set network: proxied and an egress block)", r.Name, r.Command())
		}
	}
	return append(out, p.obligationWarnings()...)
}

// networkTools are commands whose purpose is to reach the network: with
// network deny, a rule for one is most likely a mistake.
var networkTools = map[string]bool{"gh": true, "aws": true, "curl": true, "wget": true, "npm": true, "pnpm": true,
	"yarn": true, "bun": true, "pip": true, "pip3": true, "uv": true, "pipx": true, "poetry": true, "cargo": true,
	"gem": true, "bundle": true, "brew": true, "ssh": true, "scp": true, "rsync": true, "gcloud": true, "az": true,
	"kubectl": true, "terraform": true, "docker": true}

// shadowedBy returns the rule that makes allow rule i unreachable: a deny
// rule (report off) for the same binary refusing any arguments, or an
// earlier allow rule for the same binary accepting any arguments and
// environment, usable by every role that may use rule i.
func (p *Policy) shadowedBy(i int) *Rule {
	r := p.rules[i]
	for j, o := range p.rules {
		if j == i || !sameProgram(o, r) || !o.Args.catchAll(o.Effect) {
			continue
		}
		switch {
		case o.Effect == Deny && !o.Report:
			return o
		case o.Effect == Allow && j < i && o.envCovers(r) && p.rolesCover(o, r):
			return o
		}
	}
	return nil
}

// sameProgram says whether two rules name the same program: the same
// resolved binary, or, when either is absent here, the same path as
// written.
func sameProgram(a, b *Rule) bool {
	if a.Resolved != "" && b.Resolved != "" {
		return a.Resolved == b.Resolved
	}
	return slices.ContainsFunc(a.Candidates, func(c string) bool { return slices.Contains(b.Candidates, c) }) ||
		a.Binary == b.Binary
}

// catchAll says whether the spec matches every argument list for a rule
// of that effect: any positionals, no if_flags condition, and for allow
// rules any flags.
func (a ArgSpec) catchAll(effect Result) bool {
	anyArgs := len(a.Args) == 1 && a.Args[0] == "**"
	if effect == Deny {
		return (a.Args == nil || anyArgs) && len(a.IfFlags) == 0
	}
	return anyArgs && a.AnyFlags && len(a.IfFlags) == 0
}

// envCovers says whether o lets through every environment variable r does.
func (o *Rule) envCovers(r *Rule) bool {
	for _, e := range r.Env {
		if !slices.Contains(o.Env, e) {
			return false
		}
	}
	return true
}

// rolesCover says whether every role that may use r may use o too (so
// every caller of r reaches o first).
func (p *Policy) rolesCover(o, r *Rule) bool {
	for _, role := range p.roles {
		if roleRuns(role, r.Name) && !roleRuns(role, o.Name) {
			return false
		}
	}
	return true
}

func roleRuns(role *Role, rule string) bool {
	return slices.Contains(role.Commands, "*") || slices.Contains(role.Commands, rule)
}
