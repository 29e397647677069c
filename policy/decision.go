package policy

import (
	"cmp"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Result is the outcome of a decision, and a rule's effect.
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
// human can act on, and the rule that decided (nil when none did).
type Decision struct {
	Result Result
	Reason string
	Rule   *Rule
	// WouldDeny names the deny rules in report mode that matched: the
	// request is allowed, and the audit log records what would have denied
	// it.
	WouldDeny []string
	// Confirm is the rule whose approval the request needs (nil: none):
	// the allow rule itself when it confirms, else the first confirm rule
	// whose obligation the request matches (Obligation).
	Confirm *Rule
	// ConfirmTimeout is how long an approval may take: Confirm's
	// confirm_timeout, else the allowing rule's.
	ConfirmTimeout time.Duration
	// Args are the arguments as the rule matched them (argv[1:], as its
	// tool's vetting normalised them): what its attachments read, such
	// as the repository a token is minted for (a Section's ArgsChecker
	// says which it can serve).
	Args []string
}

// Request is what an Exec asks for, as the policy sees it.
type Request struct {
	Argv []string
	// Env names the variables the caller passes.
	Env []string
}

// DecideExec decides whether the subject may run the request. Deny rules
// are checked first, in file order, and match any plausible reading of
// the arguments; then the first allow rule the subject may use whose
// binary, arguments and environment all match allows. The request needs
// an approval when that rule confirms, or when any confirm rule of the
// same binary matches it as an obligation (Obligation), whichever rule
// allowed it and whoever may use the confirm rule. Binaries are
// compared after resolving symbolic links. A bare command name is decided
// as every binary its rules would run (target): a request by name is
// never allowed where the same request by any of those paths is denied.
func (p *Policy) DecideExec(s Subject, req Request) Decision {
	return p.decide(s, nil, req)
}

// decide is DecideExec for the rules allowed names (nil: the subject's).
func (p *Policy) decide(s Subject, allowed map[string]bool, req Request) Decision {
	if len(req.Argv) == 0 {
		return Decision{Reason: "empty argv"}
	}
	targets, allows, d, ok := p.targets(req.Argv)
	if !ok {
		return d
	}
	// Known tools' arguments are vetted and normalised first (tools.go);
	// the owner's deny rules still speak first for what the vetting
	// refuses too. Deny rules match liberally: by resolved path, and by
	// the path as written (so they still speak for binaries absent on
	// this host).
	refused := ""
	for _, t := range targets {
		var why string
		t.args, why = toolVet(t.bin, req.Argv[0], req.Argv[1:])
		if why != "" {
			t.args = req.Argv[1:]
			refused = cmp.Or(refused, why)
		} else if p.gitConfigWritable && toolName(t.bin, req.Argv[0]) == "git" {
			t.args = configMayForce(t.args)
		}
		for _, r := range t.rules {
			if r.Effect != Deny || !r.Args.MatchDeny(t.args) {
				continue
			}
			if r.Report {
				if !slices.Contains(d.WouldDeny, r.Name) {
					d.WouldDeny = append(d.WouldDeny, r.Name)
				}
				continue
			}
			reason := cmp.Or(r.Reason, "denied by rule "+r.Name)
			return Decision{Reason: fmt.Sprintf("%s (rule %q)", reason, r.Name), Rule: r, WouldDeny: d.WouldDeny}
		}
	}
	if refused != "" {
		d.Reason = refused
		return d
	}
	if absent(targets) {
		d.Reason = fmt.Sprintf("binary %s is not on this host", req.Argv[0])
		return d
	}
	if allowed == nil {
		allowed = p.commandsFor(s)
	}
	if r, _ := firstAllow(allows, allowed, s, req.Env, false); r != nil {
		d.Result, d.Rule = Allow, r.rule
		d.Args = r.args
		d.Reason = fmt.Sprintf("allowed by rule %q", r.rule.Name)
		d.ConfirmTimeout = r.rule.ConfirmTimeout
		if d.Confirm = obligation(targets, r.rule); d.Confirm != nil && d.Confirm != r.rule {
			d.ConfirmTimeout = d.Confirm.ConfirmTimeout
			d.Reason += fmt.Sprintf(", with the approval rule %q asks for", d.Confirm.Name)
		}
		return d
	}
	// Denied: now say why, rule by rule.
	_, why := firstAllow(allows, allowed, s, req.Env, true)
	switch {
	case len(why) > maxReasons:
		d.Reason = "no rule allows it: " + strings.Join(why[:maxReasons], "; ") + "; and more"
	case len(why) > 0:
		d.Reason = "no rule allows it: " + strings.Join(why, "; ")
	default:
		d.Reason = fmt.Sprintf("no rule allows %s", req.Argv[0])
	}
	return d
}

// obligation returns the rule whose approval a request allowed by rule
// needs: rule itself when it confirms, else the first confirm rule of
// any target whose obligation matches the target's arguments (nil: none).
func obligation(targets []*target, rule *Rule) *Rule {
	if rule.Confirm {
		return rule
	}
	for _, t := range targets {
		for _, r := range t.rules {
			if r.Obligation() && r.Args.MatchObligation(t.args) {
				return r
			}
		}
	}
	return nil
}

// Obligation reports whether the rule binds every request it matches,
// whichever rule allows it: a deny rule (report mode off) refuses them, a
// confirm rule makes them wait for an approval.
func (r *Rule) Obligation() bool {
	return r.Effect == Deny && !r.Report || r.Effect == Allow && r.Confirm
}

// target is one binary a request may run: its resolved path ("" when
// absent), the rules that speak for it in file order, and the arguments
// as its tool vetting normalised them.
type target struct {
	bin   string
	rules []*Rule
	args  []string
}

// absent says whether no target is on this host.
func absent(targets []*target) bool {
	return !slices.ContainsFunc(targets, func(t *target) bool { return t.bin != "" })
}

// candidate is an allow rule with the target whose arguments it matches.
type candidate struct {
	rule *Rule
	*target
}

// targets lists what argv[0] may run: for a path, the binary it resolves
// to; for a bare command name, the binary of each rule of that name (the
// deny rules of that name speak for all of them). allows are the allow
// rules in file order, each with its target. ok is false, with the
// refusal in d, when argv[0] is neither a path nor a known name.
func (p *Policy) targets(argv []string) (targets []*target, allows []candidate, d Decision, ok bool) {
	argv0 := argv[0]
	if filepath.IsAbs(argv0) {
		bin, _ := filepath.EvalSymlinks(argv0)
		t := &target{bin: bin, rules: p.rulesFor(bin, argv0)}
		for _, r := range t.rules {
			if bin != "" && r.Effect == Allow && r.Resolved == bin {
				allows = append(allows, candidate{r, t})
			}
		}
		return []*target{t}, allows, d, true
	}
	if !IsCommandName(argv0) {
		// Resolving a relative path would depend on the working directory.
		return nil, nil, Decision{Reason: fmt.Sprintf("%s is neither an absolute path nor a command name", argv0)}, false
	}
	named := p.byName[argv0]
	if len(named) == 0 {
		return nil, nil, Decision{Reason: fmt.Sprintf("no rule names a command called %s", argv0)}, false
	}
	var denies []*Rule
	for _, r := range named {
		if r.Effect == Deny {
			denies = append(denies, r)
		}
	}
	byBin := map[string]*target{}
	for _, r := range named {
		if r.Resolved == "" {
			continue
		}
		t := byBin[r.Resolved]
		if t == nil {
			t = &target{bin: r.Resolved, rules: denies}
			byBin[r.Resolved] = t
			targets = append(targets, t)
		}
		// Every rule for this binary, by its resolved path and by the
		// path the rule wrote, as if the caller had written it.
		t.rules = mergeRules(t.rules, p.rulesFor(r.Resolved, r.Binary))
		if r.Effect == Allow {
			allows = append(allows, candidate{r, t})
		}
	}
	if len(targets) == 0 {
		targets = []*target{{rules: denies}}
	}
	return targets, allows, d, true
}

// maxReasons bounds how many rules a denial explains.
const maxReasons = 5

// firstAllow returns the first allow candidate that the subject may use
// and that admits its target's arguments and the environment. With
// explain, it also says why each candidate before it did not.
func firstAllow(allows []candidate, allowed map[string]bool, s Subject, env []string, explain bool) (*candidate, []string) {
	var why []string
	for i := range allows {
		c := &allows[i]
		r := c.rule
		if explain && len(why) > maxReasons {
			// Enough said: count the rest without building their reasons.
			explain = false
		}
		if !allowed["*"] && !allowed[r.Name] {
			if explain {
				why = append(why, fmt.Sprintf("rule %q: %s may not use it", r.Name, s.Principal))
			}
			continue
		}
		if ok, mismatch := r.Args.matchAllow(c.args, explain, nil); !ok {
			if explain {
				why = append(why, fmt.Sprintf("rule %q: %s", r.Name, mismatch))
			}
			continue
		}
		if bad, ok := envNotAllowed(r, env); ok {
			if explain {
				why = append(why, fmt.Sprintf("rule %q: environment variable %s is not allowed", r.Name, bad))
			}
			continue
		}
		if bad := r.checkSectionArgs(c.args); bad != "" {
			if explain {
				why = append(why, fmt.Sprintf("rule %q: %s", r.Name, bad))
			}
			continue
		}
		return c, why
	}
	return nil, why
}

// rulesFor returns, in file order, the rules whose binary is bin (resolved)
// or written exactly as argv0.
func (p *Policy) rulesFor(bin, argv0 string) []*Rule {
	if bin == "" {
		return p.byBinary[argv0]
	}
	if bin == argv0 {
		return p.byBinary[bin]
	}
	return mergeRules(p.byBinary[bin], p.byBinary[argv0])
}

// mergeRules merges two lists of rules in file order, each rule once.
func mergeRules(a, b []*Rule) []*Rule {
	switch {
	case len(b) == 0:
		return a
	case len(a) == 0:
		return b
	}
	merged := make([]*Rule, 0, len(a)+len(b))
	for i, j := 0, 0; i < len(a) || j < len(b); {
		switch {
		case j == len(b) || (i < len(a) && a[i].Line < b[j].Line):
			merged = append(merged, a[i])
			i++
		case i < len(a) && a[i] == b[j]:
			merged = append(merged, a[i])
			i, j = i+1, j+1
		default:
			merged = append(merged, b[j])
			j++
		}
	}
	return merged
}

func envNotAllowed(r *Rule, env []string) (string, bool) {
	for _, e := range env {
		if !slices.Contains(r.Env, e) {
			return e, true
		}
	}
	return "", false
}

// commandsFor returns the rule names (or "*") the subject's roles with the
// exec permission may run.
func (p *Policy) commandsFor(s Subject) map[string]bool {
	out := map[string]bool{}
	for _, c := range p.grantedCommands(s) {
		out[c] = true
	}
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

// Usable returns the allow rules the subject may run, in file order, and
// the deny rules (report mode off) that speak for the same commands: what
// the subject may ask for, and what the owner refuses whatever it asks.
func (p *Policy) Usable(s Subject) (allow, deny []*Rule) {
	if !p.Allows(s, PermExec) {
		return nil, nil
	}
	allowed := p.commandsFor(s)
	names := map[string]bool{}
	for _, r := range p.rules {
		if r.Effect == Allow && (allowed["*"] || allowed[r.Name]) {
			allow = append(allow, r)
			names[r.Command()] = true
		}
	}
	for _, r := range p.rules {
		if r.Effect == Deny && !r.Report && names[r.Command()] {
			deny = append(deny, r)
		}
	}
	return allow, deny
}
