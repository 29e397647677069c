package policy

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"coily.dev/coily/ghapp"
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
	// GitHubRepository is the repository the rule's github_app token is
	// minted for (Rule.GitHubRepository); zero without github_app.
	GitHubRepository ghapp.Repository
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
// binary, arguments and environment all match allows. Binaries are
// compared after resolving symbolic links.
func (p *Policy) DecideExec(s Subject, req Request) Decision {
	if len(req.Argv) == 0 {
		return Decision{Reason: "empty argv"}
	}
	// Deny rules match liberally: by resolved path, and by the path as
	// written (so they still speak for binaries absent on this host); a
	// bare command name by every rule of that name.
	bare := !filepath.IsAbs(req.Argv[0])
	if bare && !IsCommandName(req.Argv[0]) {
		// Resolving a relative path would depend on the working directory.
		return Decision{Reason: fmt.Sprintf("%s is neither an absolute path nor a command name", req.Argv[0])}
	}
	var bin string
	var candidates []*Rule
	if bare {
		candidates = p.byName[req.Argv[0]]
		if len(candidates) == 0 {
			return Decision{Reason: fmt.Sprintf("no rule names a command called %s", req.Argv[0])}
		}
		bin = anyBinary
	} else {
		if b, err := filepath.EvalSymlinks(req.Argv[0]); err == nil {
			bin = b
		}
		candidates = p.rulesFor(bin, req.Argv[0])
	}
	// Known tools' arguments are vetted and normalised first (tools.go);
	// the owner's deny rules still speak first for what the vetting
	// refuses too.
	args, refused := toolVet(strings.TrimPrefix(bin, anyBinary), req.Argv[0], req.Argv[1:])
	if refused != "" {
		args = req.Argv[1:]
	}
	var d Decision
	for _, r := range candidates {
		if r.Effect != Deny || !r.Args.MatchDeny(args) {
			continue
		}
		if r.Report {
			d.WouldDeny = append(d.WouldDeny, r.Name)
			continue
		}
		reason := r.Reason
		if reason == "" {
			reason = "denied by rule " + r.Name
		}
		return Decision{Reason: fmt.Sprintf("%s (rule %q)", reason, r.Name), Rule: r, WouldDeny: d.WouldDeny}
	}
	if refused != "" {
		d.Reason = refused
		return d
	}
	if bin == "" || bare && !slices.ContainsFunc(candidates, func(r *Rule) bool { return r.Resolved != "" }) {
		d.Reason = fmt.Sprintf("binary %s is not on this host", req.Argv[0])
		return d
	}
	allowed := p.commandsFor(s)
	if r, _ := firstAllow(candidates, bin, allowed, s, args, req.Env, false); r != nil {
		d.Result, d.Rule = Allow, r
		d.GitHubRepository, _ = r.GitHubRepository(args)
		d.Reason = fmt.Sprintf("allowed by rule %q", r.Name)
		return d
	}
	// Denied: now say why, rule by rule.
	_, why := firstAllow(candidates, bin, allowed, s, args, req.Env, true)
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

// anyBinary stands for the binary of a request by bare command name: each
// rule of that name runs its own (resolved) binary.
const anyBinary = "\x00any"

// maxReasons bounds how many rules a denial explains.
const maxReasons = 5

// firstAllow returns the first allow rule among candidates that the
// subject may use and that admits the arguments and environment. With
// explain, it also says why each candidate before it did not.
func firstAllow(candidates []*Rule, bin string, allowed map[string]bool, s Subject, args, env []string, explain bool) (*Rule, []string) {
	var why []string
	for _, r := range candidates {
		if explain && len(why) > maxReasons {
			// Enough said: count the rest without building their reasons.
			explain = false
		}
		if r.Effect != Allow || r.Resolved == "" || bin != anyBinary && r.Resolved != bin {
			continue
		}
		if !allowed["*"] && !allowed[r.Name] {
			if explain {
				why = append(why, fmt.Sprintf("rule %q: %s may not use it", r.Name, s.Principal))
			}
			continue
		}
		if ok, mismatch := r.Args.matchAllow(args, explain, nil); !ok {
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
		if _, bad := r.GitHubRepository(args); bad != "" {
			if explain {
				why = append(why, fmt.Sprintf("rule %q: %s", r.Name, bad))
			}
			continue
		}
		return r, why
	}
	return nil, why
}

// rulesFor returns, in file order, the rules whose binary is bin (resolved)
// or written exactly as argv0.
func (p *Policy) rulesFor(bin, argv0 string) []*Rule {
	a, b := p.byBinary[bin], p.byBinary[argv0]
	switch {
	case bin == "" || bin == argv0 || len(b) == 0:
		if bin == "" {
			return b
		}
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
