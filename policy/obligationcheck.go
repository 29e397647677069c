package policy

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// What `coily policy check` proves about obligations (DecideExec): for
// each deny rule and confirm rule, no allow rule of the same binary admits
// a request the obligation names without it applying; and where a confirm
// rule now binds requests an earlier allow rule admitted without an
// approval (before obligations, only the first matching allow rule's
// confirm counted), it says so, with the fix. The requests are sampled
// from the two rules' specs (sampleArgs), a bounded set.

// maxSamples bounds the argument lists tried for one obligation and one
// allow rule.
const maxSamples = 1024

// maxCheckWork bounds the whole check: each request it decides costs one
// unit per rule of the policy (a decision weighs every rule, about 0.1 ms
// in a policy of 40), so a few seconds at most, whatever its size.
const maxCheckWork = 800_000

// obligationWarnings checks every obligation against every allow rule of
// the same binary present on this host.
func (p *Policy) obligationWarnings() []Warning {
	var out []Warning
	budget := maxCheckWork
	for _, o := range p.rules {
		if !o.Obligation() {
			continue
		}
		for _, a := range p.rules {
			if a == o || a.Effect != Allow || a.Resolved == "" || !sameProgram(a, o) {
				continue
			}
			if budget <= 0 {
				// Each decision weighs every rule: pairs of pairs of rules
				// grow as the cube of the policy, and the server runs the
				// check on every reload.
				return append(out, Warning{Rule: o.Name, Line: o.Line, Msg: fmt.Sprintf(
					"the obligations were checked up to rule %q against rule %q and no further: the check stops after %d sampled requests in a policy of %d rules (coily policy explain decides any one request)", o.Name, a.Name, maxCheckWork/max(1, len(p.rules)), len(p.rules))})
			}
			if msg := p.checkObligation(o, a, &budget); msg != "" {
				out = append(out, Warning{Rule: o.Name, Line: o.Line, Msg: msg})
			}
		}
	}
	return out
}

// ReloadWarnings are what the server logs when it loads the policy: rules
// that cannot match on this host, and what checking the obligations finds.
func (p *Policy) ReloadWarnings() []Warning {
	var out []Warning
	for _, r := range p.rules {
		if r.Absent != nil {
			out = append(out, Warning{Rule: r.Name, Line: r.Line, Msg: fmt.Sprintf("rule %q cannot match on this host: %v", r.Name, r.Absent)})
		}
	}
	return append(out, p.obligationWarnings()...)
}

// checkObligation tries the requests sampled from allow rule a and
// obligation o, as a caller who may use a alone, and reports the first
// that a admits though o names it, without o (or another obligation)
// applying; else, for a confirm rule after a, the first a admitted
// without approval before obligations ("" when none).
func (p *Policy) checkObligation(o, a *Rule, budget *int) string {
	allowed := map[string]bool{a.Name: true}
	changed := ""
	for _, args := range sampleArgs(&a.Args, &o.Args) {
		if *budget -= len(p.rules); *budget < 0 {
			return changed
		}
		named := o.Args.MatchObligation(args)
		if o.Effect == Deny {
			named = o.Args.MatchDeny(args)
		}
		if !named {
			continue
		}
		d := p.decide(Subject{Principal: "policy check"}, allowed, Request{Argv: append([]string{a.Binary}, args...)})
		if d.Result != Allow || d.Rule != a {
			continue
		}
		shown := QuoteShort(strings.Join(append([]string{a.Command()}, args...), " "))
		if o.Effect == Deny || d.Confirm == nil {
			return fmt.Sprintf("rule %q (line %d) allows %s, which rule %q names, without %q applying: coily reads the arguments otherwise (a known tool's are normalised first; policy explain shows how), so write rule %q as coily reads them", a.Name, a.Line, shown, o.Name, o.Name, o.Name)
		}
		if changed == "" && a.Line < o.Line && !a.Confirm && d.Confirm == o {
			changed = fmt.Sprintf("rule %q now also asks for an approval of requests the earlier rule %q (line %d) allows, such as %s: a confirm rule binds every request it names, whichever rule allows it. "+
				"If that is meant, move rule %q before rule %q; if not, narrow it with if_flags or args", o.Name, a.Name, a.Line, shown, o.Name, a.Name)
		}
	}
	return changed
}

// sampleArgs lists argument lists (argv[1:]) from an allow rule's spec and
// an obligation's: the positionals each spec names (a pattern read
// literally, '*' and '?' as "x"; a final "**" as none, one or two "x"),
// each alone and with one of the obligation's if_flags in each spelling
// (exact, "=x", abbreviated; a short one alone and grouped with another
// flag) at the start, after the first positional, at the end, and before
// a "--" that ends the flags. At most maxSamples.
func sampleArgs(allow, oblig *ArgSpec) [][]string {
	var pos [][]string
	for _, spec := range []*ArgSpec{allow, oblig} {
		pos = append(pos, positionalSamples(spec.Args)...)
	}
	flags := [][]string{nil}
	for _, f := range oblig.IfFlags {
		for _, s := range flagSpellings(f, allow) {
			flags = append(flags, []string{s})
		}
	}
	var out [][]string
	for _, ps := range pos {
		for _, fl := range flags {
			for _, at := range []int{0, 1, len(ps)} {
				if len(out) >= maxSamples {
					return out
				}
				at = min(at, len(ps))
				out = append(out, slices.Concat(ps[:at], fl, ps[at:]))
			}
			out = append(out, slices.Concat(fl, []string{"--"}, ps))
		}
	}
	return out
}

// positionalSamples reads patterns literally; a final "**" as none, one
// or two more.
func positionalSamples(pats []string) [][]string {
	var fixed []string
	rest := false
	for _, p := range pats {
		if p == "**" {
			rest = true
			continue
		}
		fixed = append(fixed, literal(p))
	}
	if !rest {
		return [][]string{fixed}
	}
	return [][]string{fixed, append(slices.Clone(fixed), "x"), append(slices.Clone(fixed), "x", "x")}
}

// literal is a string a pattern matches: '*' and '?' read as "x", escapes
// as the character escaped.
func literal(p string) string {
	var b strings.Builder
	for i := 0; i < len(p); i++ {
		switch c := p[i]; c {
		case '*', '?':
			b.WriteByte('x')
		case '\\':
			if i+1 < len(p) {
				i++
				b.WriteByte(p[i])
			}
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// flagSpellings are ways to write flag f that a liberal reader takes for
// it: itself, with a value, abbreviated (long), or grouped after another
// short flag the allow rule lists (short).
func flagSpellings(f string, allow *ArgSpec) []string {
	if long, ok := strings.CutPrefix(f, "--"); ok {
		out := []string{f, f + "=x"}
		if len(long) > 1 {
			out = append(out, "--"+long[:len(long)-1])
		}
		return out
	}
	out := []string{f}
	for _, k := range slices.Sorted(maps.Keys(allow.Flags)) {
		if len(k) == 2 && k != f && allow.Flags[k].Bool {
			return append(out, k+f[1:], f+k[1:])
		}
	}
	return append(out, "-v"+f[1:])
}
