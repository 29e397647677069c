package policycase

import (
	"fmt"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"coily.dev/coily/policy"
)

// reader walks a tests file's nodes, keeping the first error.
type reader struct {
	name string
	err  *policy.Error
}

func (r *reader) fail(n *yaml.Node, format string, args ...any) {
	if r.err == nil {
		r.err = &policy.Error{File: r.name, Line: n.Line, Column: n.Column, Msg: fmt.Sprintf(format, args...)}
	}
}

// deref follows an alias to its anchor (the expanded size is bounded
// before the walk).
func deref(n *yaml.Node) *yaml.Node {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

// fields reads a mapping's keys, refusing those not in known, duplicates
// and merge keys, and calls f with each value.
func (r *reader) fields(n *yaml.Node, what string, known []string, f func(key string, v *yaml.Node)) {
	n = deref(n)
	if n.Kind != yaml.MappingNode {
		r.fail(n, "%s must be a mapping", what)
		return
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content) && r.err == nil; i += 2 {
		k, v := deref(n.Content[i]), n.Content[i+1]
		switch {
		case k.Kind != yaml.ScalarNode || k.Tag == "!!merge":
			r.fail(k, "%s: keys must be plain names", what)
		case !slices.Contains(known, k.Value):
			r.fail(k, "%s: unknown key %q (known: %s)", what, k.Value, strings.Join(known, ", "))
		case seen[k.Value]:
			r.fail(k, "%s: key %q given twice", what, k.Value)
		default:
			seen[k.Value] = true
			f(k.Value, v)
		}
	}
}

// str reads a scalar string of at most MaxString bytes.
func (r *reader) str(n *yaml.Node, what string) string {
	n = deref(n)
	switch {
	case n.Kind != yaml.ScalarNode:
		r.fail(n, "%s must be a string", what)
	case n.Style&yaml.TaggedStyle != 0:
		r.fail(n, "%s: explicit tags are not allowed", what)
	case n.Tag == "!!null":
		r.fail(n, "%s is empty", what)
	case len(n.Value) > MaxString:
		r.fail(n, "%s is longer than %d bytes", what, MaxString)
	default:
		return n.Value
	}
	return ""
}

// strs reads a sequence of at most MaxArgs strings.
func (r *reader) strs(n *yaml.Node, what string) []string {
	n = deref(n)
	if n.Kind != yaml.SequenceNode {
		r.fail(n, "%s must be a list", what)
		return nil
	}
	if len(n.Content) > MaxArgs {
		r.fail(n, "%s has more than %d entries", what, MaxArgs)
		return nil
	}
	out := make([]string, 0, len(n.Content))
	for _, c := range n.Content {
		out = append(out, r.str(c, what))
	}
	return out
}

func (r *reader) suite(doc *yaml.Node) *Suite {
	s := &Suite{Path: r.name}
	version := 0
	r.fields(doc, "tests file", []string{"version", "cases"}, func(key string, v *yaml.Node) {
		switch key {
		case "version":
			if r.str(v, "version") != "1" {
				r.fail(v, "version must be 1")
			}
			version = 1
		case "cases":
			s.Cases = r.cases(v)
		}
	})
	if r.err == nil && version != 1 {
		r.fail(doc, "tests file: version: 1 is required")
	}
	if r.err == nil && len(s.Cases) == 0 {
		r.fail(doc, "tests file has no cases")
	}
	return s
}

func (r *reader) cases(n *yaml.Node) []Case {
	n = deref(n)
	if n.Kind != yaml.SequenceNode {
		r.fail(n, "cases must be a list")
		return nil
	}
	if len(n.Content) > MaxCases {
		r.fail(n, "more than %d cases", MaxCases)
		return nil
	}
	var out []Case
	names := map[string]bool{}
	for _, c := range n.Content {
		k := r.oneCase(c)
		if r.err != nil {
			return nil
		}
		if names[k.Name] {
			r.fail(deref(c), "case %q named twice", k.Name)
			return nil
		}
		names[k.Name] = true
		out = append(out, k)
	}
	return out
}

var caseKeys = []string{"name", "principal", "roles", "argv", "env", "expect", "rule", "code"}

func (r *reader) oneCase(n *yaml.Node) Case {
	n = deref(n)
	k := Case{Line: n.Line, Column: n.Column}
	r.fields(n, "case", caseKeys, func(key string, v *yaml.Node) {
		switch key {
		case "name":
			k.Name = r.str(v, "name")
		case "principal":
			k.Principal = r.str(v, "principal")
		case "roles":
			k.Roles = r.strs(v, "roles")
		case "argv":
			k.Argv = r.strs(v, "argv")
		case "env":
			k.Env = r.envNames(v)
		case "expect":
			k.Expect = Expect(r.str(v, "expect"))
			if r.err == nil && k.Expect != Allow && k.Expect != Confirm && k.Expect != Deny {
				r.fail(deref(v), "expect must be allow, confirm or deny, not %q", k.Expect)
			}
		case "rule":
			k.Rule = r.str(v, "rule")
		case "code":
			k.Code = r.str(v, "code")
			if r.err == nil && k.Code != codePolicyDeny && k.Code != codePermissionDenied {
				r.fail(deref(v), "code must be %s or %s, not %q", codePolicyDeny, codePermissionDenied, k.Code)
			}
		}
	})
	if r.err != nil {
		return k
	}
	r.required(n, k)
	return k
}

// envNames reads the names of the variables a request passes.
func (r *reader) envNames(n *yaml.Node) []string {
	names := r.strs(n, "env")
	for _, name := range names {
		if name == "" || strings.ContainsAny(name, "=\x00") {
			r.fail(deref(n), "env lists variable names (no \"=\"), not %q", name)
		}
	}
	return names
}

// required refuses a case missing what every case must say.
func (r *reader) required(n *yaml.Node, k Case) {
	switch {
	case k.Name == "":
		r.fail(n, "a case needs a name")
	case k.Principal == "":
		r.fail(n, "case %q needs a principal", k.Name)
	case len(k.Argv) == 0 || k.Argv[0] == "":
		r.fail(n, "case %q needs an argv", k.Name)
	case k.Expect == "":
		r.fail(n, "case %q needs expect: allow, confirm or deny", k.Name)
	case k.Expect != Deny && k.Rule == "":
		r.fail(n, "case %q expects %s: name the rule", k.Name, k.Expect)
	case k.Expect != Deny && k.Code != "":
		r.fail(n, "case %q expects %s: a code is for a deny", k.Name, k.Expect)
	}
}
