package policy

import (
	"fmt"
	"slices"
	"strings"

	"coily.dev/coily/egress"
)

// EgressSpec is an egress block as text from somewhere other than a policy
// file, such as `coily sandbox exec --egress-*`. ParseEgress reads it with
// the parsers of a rule's `egress:` block, so an allowlist tried by hand
// means what the same lines mean in a policy.
type EgressSpec struct {
	Mode    string   // enforce (also when empty) or observe
	Allow   []string // HOST[:PORT] or *.DOMAIN[:PORT], as in `allow`
	Presets []string // names from EgressPresets, as in `presets`
	CIDRs   []string // as in `allow_cidrs`: masked prefixes
	Inspect []string // as in `inspect`: hosts of the allowlist
	// Inject are VAR@HOST[:PORT][/PATH]:FORM, FORM bearer, token, basic or
	// header=NAME: as an `inject` entry, without its credential reference
	// (the caller supplies the value).
	Inject []string
}

// EgressSpecError names the EgressSpec field (by its policy key: mode,
// allow, presets, allow_cidrs) and the value that did not parse.
type EgressSpecError struct {
	Field string
	Value string
	Err   error
}

func (e *EgressSpecError) Error() string { return fmt.Sprintf("egress %s: %v", e.Field, e.Err) }

func (e *EgressSpecError) Unwrap() error { return e.Err }

// ParseEgress reads spec as a rule's egress block would be read, and
// returns the first field in error as an *EgressSpecError. Registries
// (mirrors) are a policy file's alone.
func ParseEgress(spec EgressSpec) (*Egress, error) {
	mode, err := parseEgressMode(spec.Mode)
	if err != nil {
		return nil, &EgressSpecError{Field: "mode", Value: spec.Mode, Err: err}
	}
	e := &Egress{Mode: mode, Presets: slices.Clone(spec.Presets)}
	for _, s := range spec.Allow {
		hp, err := ParseHostPort(s)
		if err != nil {
			return nil, &EgressSpecError{Field: "allow", Value: s, Err: err}
		}
		e.Allow = append(e.Allow, hp)
	}
	for _, s := range spec.CIDRs {
		p, err := parseCIDR(s)
		if err != nil {
			return nil, &EgressSpecError{Field: "allow_cidrs", Value: s, Err: err}
		}
		e.CIDRs = append(e.CIDRs, p)
	}
	for _, name := range spec.Presets {
		if err := checkEgressPreset(name); err != nil {
			return nil, &EgressSpecError{Field: "presets", Value: name, Err: err}
		}
	}
	if err := checkInspect(e, spec.Inspect); err != nil {
		return nil, &EgressSpecError{Field: "inspect", Value: strings.Join(spec.Inspect, ","), Err: err}
	}
	for _, s := range spec.Inject {
		in, err := ParseInjectSpec(s)
		if err == nil && !slices.Contains(e.Inspect, in.Host) {
			err = fmt.Errorf("egress inject: host %q is not an inspected host", in.Host)
		}
		if err != nil {
			return nil, &EgressSpecError{Field: "inject", Value: s, Err: err}
		}
		e.Inject = append(e.Inject, in)
	}
	if _, err := SigV4Groups(e.Inject); err != nil {
		return nil, &EgressSpecError{Field: "inject", Value: strings.Join(spec.Inject, ","), Err: err}
	}
	return e, nil
}

// ParseInjectSpec reads VAR@HOST[:PORT][/PATH]:FORM (FORM bearer, token, basic,
// sigv4 or header=NAME) into an Inject without a credential reference.
func ParseInjectSpec(s string) (Inject, error) {
	env, rest, ok := strings.Cut(s, "@")
	i := strings.LastIndexByte(rest, ':')
	if !ok || i < 0 {
		return Inject{}, fmt.Errorf("egress inject %q: want VAR@HOST[:PORT][/PATH]:FORM", s)
	}
	target, form := rest[:i], rest[i+1:]
	host, path := target, ""
	if j := strings.IndexByte(target, '/'); j >= 0 {
		host, path = target[:j], target[j:]
	}
	header := ""
	if name, ok := strings.CutPrefix(form, "header="); ok {
		form, header = "", name
	}
	in := Inject{Env: env, Path: path, Header: header}
	h, port, err := injectHost(host)
	if err != nil {
		return in, err
	}
	in.Host, in.Port = h, port
	switch {
	case !ValidEnvName(env):
		return in, fmt.Errorf("egress inject: bad variable name %q", env)
	case ReservedEnv(env):
		return in, fmt.Errorf("egress inject: %s is set by the server", env)
	}
	if err := checkInjectPath(path); err != nil {
		return in, err
	}
	f, err := injectForm(form, header)
	in.Form = f
	return in, err
}

// parseEgressMode reads `egress.mode`: empty means enforce.
func parseEgressMode(s string) (string, error) {
	switch s {
	case "":
		return EgressEnforce, nil
	case EgressEnforce, EgressObserve:
		return s, nil
	}
	return "", fmt.Errorf("egress mode must be enforce or observe, got %q", s)
}

// checkEgressPreset refuses a preset name the table does not hold.
func checkEgressPreset(name string) error {
	if _, ok := egressPresets[name]; !ok {
		return fmt.Errorf("unknown egress preset %q (known: %s)", name, strings.Join(EgressPresets(), ", "))
	}
	return nil
}

// ProxyAllowlist is what the egress proxy enforces for e: an allowlist of
// its effective entries (presets expanded) and its CIDRs, and its mode. A
// nil Egress (network proxied without an egress block) allows nothing.
func (e *Egress) ProxyAllowlist() (*egress.Allowlist, egress.Mode, error) {
	var entries []string
	for _, hp := range e.Effective() {
		entries = append(entries, hp.String())
	}
	var cidrs []egress.CIDR
	mode := egress.Enforce
	if e != nil {
		cidrs = e.CIDRs
		if e.Mode == EgressObserve {
			mode = egress.Observe
		}
	}
	allow, err := egress.NewAllowlist(entries, cidrs)
	if err != nil {
		return nil, 0, fmt.Errorf("egress allowlist: %w", err)
	}
	return allow, mode, nil
}
