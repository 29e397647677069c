package policy

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"

	"go.yaml.in/yaml/v3"
)

// A Section is a key of an allow rule that a package of its own reads and
// acts on: what an execution carries for that key (a token, an agent, a
// credential helper) lives with its schema. Each such package registers
// its section in its init, as image formats and database drivers do, and
// every binary that parses policies links the packages of the sections it
// knows. A key no linked package registered is an unknown key, refused as
// any other: a binary never runs a rule whose section it cannot honour.
type Section interface {
	// Key is the rule's key: a word the core schema does not use.
	Key() string
	// Stage is when in a rule's reading the section is read.
	Stage() Stage
	// Parse reads the key's value n (present, on an allow rule) for the
	// rule p is building. It reports the first fault with p.FailAt and
	// returns the value kept on the rule (Rule.Section), nil for none.
	// A value returned with a fault is dropped.
	Parse(p *SectionParser, n *yaml.Node) any
}

// Stage is a point in the reading of an allow rule, after which a section
// may rely on what was read before it.
type Stage int

const (
	// AfterCredentials is after the rule's arguments, sandbox, network,
	// timeout, environment and credentials.
	AfterCredentials Stage = iota
	// AfterEgress is after its egress block too.
	AfterEgress
)

// Optional behaviour of a Section, asked of it for each rule that has it.
type (
	// BackendLister names the keystore backends the rule's section
	// references (Policy.CredentialBackends).
	BackendLister interface {
		Backends(r *Rule) []string
	}
	// Linter says what `coily policy check` should warn about the rule's
	// section (Policy.Warnings).
	Linter interface {
		Warnings(r *Rule) []string
	}
	// ArgsChecker refuses arguments the rule's patterns match but its
	// section cannot serve, with the reason; "" when it can. A rule whose
	// section refuses the arguments does not match them (DecideExec).
	ArgsChecker interface {
		CheckArgs(r *Rule, args []string) string
	}
)

// sections are the registered sections, in the order of their keys.
var sections struct {
	sync.RWMutex
	list []Section
}

// RegisterSection makes s's key known to every policy parsed from now on.
// It panics when the key is empty, is a key of the core schema, or was
// registered already.
func RegisterSection(s Section) {
	sections.Lock()
	defer sections.Unlock()
	k := s.Key()
	switch {
	case k == "":
		panic("policy: RegisterSection with an empty key")
	case slices.Contains(coreKeys(), k):
		panic("policy: RegisterSection of the core key " + k)
	case slices.ContainsFunc(sections.list, func(o Section) bool { return o.Key() == k }):
		panic("policy: RegisterSection called twice for " + k)
	}
	sections.list = append(sections.list, s)
	slices.SortFunc(sections.list, func(a, b Section) int { return strings.Compare(a.Key(), b.Key()) })
}

// registered is the registered sections, in the order of their keys.
func registered() []Section {
	sections.RLock()
	defer sections.RUnlock()
	return slices.Clone(sections.list)
}

// SectionParser is what a Section reads its key with: the rule being
// built, and the way to report a fault at a place of the file.
type SectionParser struct {
	// Rule is the rule being built, read so far (Stage says how far).
	// A section reads it; it keeps its own value with its return.
	Rule *Rule
	b    *builder
}

// FailAt reports a fault at n, as "file:line:col: " and the message.
// Only the first fault of the policy is reported.
func (p *SectionParser) FailAt(n *yaml.Node, format string, args ...any) {
	p.b.failAt(n, format, args...)
}

// Failed reports whether the policy has a fault already.
func (p *SectionParser) Failed() bool { return p.b.err != nil }

// MapValue is the value of key in the mapping n; nil when n is no mapping
// or has no such key.
func MapValue(n *yaml.Node, key string) *yaml.Node { return child(n, key) }

// sectionValue is a section a rule has, with what it read.
type sectionValue struct {
	s Section
	v any
}

// Section is what the section of that key read for the rule; nil when
// the rule has none. The package that registered the key reads it
// through a typed accessor.
func (r *Rule) Section(key string) any {
	for _, sv := range r.sections {
		if sv.s.Key() == key {
			return sv.v
		}
	}
	return nil
}

// ruleSections reads the rule's registered sections of the stage.
func (b *builder) ruleSections(r *Rule, rf ruleFile, stage Stage) {
	for _, s := range registered() {
		n, ok := rf.Sections[s.Key()]
		if s.Stage() != stage || !ok {
			continue
		}
		if v := s.Parse(&SectionParser{Rule: r, b: b}, &n); v != nil && b.err == nil {
			r.sections = append(r.sections, sectionValue{s, v})
		}
	}
}

// sectionKeys are the registered keys, in order.
func sectionKeys() []string {
	var out []string
	for _, s := range registered() {
		out = append(out, s.Key())
	}
	return out
}

// checkSectionArgs is the first refusal of args by one of the rule's
// sections, "" when none refuses them.
func (r *Rule) checkSectionArgs(args []string) string {
	for _, sv := range r.sections {
		if c, ok := sv.s.(ArgsChecker); ok {
			if why := c.CheckArgs(r, args); why != "" {
				return why
			}
		}
	}
	return ""
}

// sectionWarnings are the warnings of the rule's sections.
func (r *Rule) sectionWarnings() []string {
	var out []string
	for _, sv := range r.sections {
		if l, ok := sv.s.(Linter); ok {
			out = append(out, l.Warnings(r)...)
		}
	}
	return out
}

// sectionBackends are the keystore backends the rule's sections name.
func (r *Rule) sectionBackends() []string {
	var out []string
	for _, sv := range r.sections {
		if l, ok := sv.s.(BackendLister); ok {
			out = append(out, l.Backends(r)...)
		}
	}
	return out
}

// ruleMapping keeps the mapping a rule was decoded from, for the keys the
// core schema does not read (an inline field of ruleFile: the decoder
// hands it the rule's whole mapping).
type ruleMapping struct{ n *yaml.Node }

func (m *ruleMapping) UnmarshalYAML(n *yaml.Node) error {
	m.n = n
	return nil
}

// coreKeys are the keys of a rule that ruleFile reads.
func coreKeys() []string {
	t := reflect.TypeFor[ruleFile]()
	var out []string
	for i := range t.NumField() {
		if name, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ","); name != "" && name != "-" {
			out = append(out, name)
		}
	}
	return out
}

// readSections finds each rule's registered sections in its mapping, and
// adds to err (the decoder's) what the decoder says of a key it does not
// know or a key given twice: an unregistered key is refused as unknown.
// The messages are the decoder's, in the order of their lines.
func readSections(f *fileV1, err error) error {
	var te *yaml.TypeError
	if err != nil && !errors.As(err, &te) {
		return err
	}
	var msgs []string
	if te != nil {
		msgs = te.Errors
	}
	known, core := sectionKeys(), coreKeys()
	for i := range f.Commands {
		rf := &f.Commands[i]
		rf.Sections = map[string]yaml.Node{}
		if rf.Mapping.n != nil {
			msgs = append(msgs, rf.sections(rf.Mapping.n, known, core, true)...)
		}
	}
	if len(msgs) == 0 {
		return nil
	}
	slices.SortStableFunc(msgs, func(a, b string) int { return msgLine(a) - msgLine(b) })
	return &yaml.TypeError{Errors: msgs}
}

// sections reads the section keys of the mapping n into rf.Sections, the
// first of each key (then those of its merged mappings, which do not
// replace it), with the messages for unknown and repeated keys.
func (rf *ruleFile) sections(n *yaml.Node, known, core []string, direct bool) []string {
	var msgs []string
	var merges []*yaml.Node
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		switch {
		case k.Kind == yaml.ScalarNode && k.Tag == "!!merge":
			merges = append(merges, v)
			continue
		case slices.Contains(core, k.Value):
			continue
		case !slices.Contains(known, k.Value):
			msgs = append(msgs, fmt.Sprintf("line %d: field %s not found in type policy.ruleFile", k.Line, k.Value))
			continue
		case seen[k.Value] && direct:
			msgs = append(msgs, fmt.Sprintf("line %d: field %s already set in type policy.ruleFile", k.Line, k.Value))
			continue
		}
		seen[k.Value] = true
		if _, set := rf.Sections[k.Value]; !set {
			rf.Sections[k.Value] = *v
		}
	}
	for _, m := range merges {
		for _, mn := range mergedMappings(m) {
			msgs = append(msgs, rf.sections(mn, known, core, false)...)
		}
	}
	return msgs
}

// mergedMappings are the mappings a merge key's value names: one, or a
// list of them, each perhaps through an alias.
func mergedMappings(v *yaml.Node) []*yaml.Node {
	for v.Kind == yaml.AliasNode && v.Alias != nil {
		v = v.Alias
	}
	switch v.Kind {
	case yaml.MappingNode:
		return []*yaml.Node{v}
	case yaml.SequenceNode:
		var out []*yaml.Node
		for _, c := range v.Content {
			out = append(out, mergedMappings(c)...)
		}
		return out
	}
	return nil
}

// msgLine is the line a decoder message names, 0 for none.
func msgLine(msg string) int {
	if m := yamlLine.FindStringSubmatch(msg); m != nil {
		n, _ := strconv.Atoi(m[1])
		return n
	}
	return 0
}
