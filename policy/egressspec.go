package policy

import (
	"fmt"
	"net/netip"
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
	// InjectPresets are [VAR=]NAME[@HOST[:PORT][/PATH]]: as an `inject`
	// entry {preset: NAME, env: VAR, host: HOST[:PORT], path: /PATH},
	// without its credential reference, expanded by the same code.
	InjectPresets []string
	// Hosts are NAME=IP, as a `hosts` entry's name and one of its
	// addresses (a name given again adds an address).
	Hosts []string
}

// EgressSpecError names the EgressSpec field (by its policy key: mode,
// allow, presets, allow_cidrs, hosts, inspect, inject; inject_preset
// for InjectPresets) and the value that did not parse.
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
	for _, s := range spec.Hosts {
		if err := pinHostSpec(e, s); err != nil {
			return nil, &EgressSpecError{Field: "hosts", Value: s, Err: err}
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
	for _, s := range spec.InjectPresets {
		ins, err := injectPresetSpec(e, s)
		if err != nil {
			return nil, &EgressSpecError{Field: "inject_preset", Value: s, Err: err}
		}
		e.Inject = append(e.Inject, ins...)
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
	host, path := splitTarget(target)
	header := ""
	if name, ok := strings.CutPrefix(form, "header="); ok {
		form, header = "", name
	}
	return injectSpec(injectFile{Env: env, Host: host, Path: path, Form: form, Header: header})
}

// splitTarget cuts HOST[:PORT][/PATH] at its first "/".
func splitTarget(target string) (host, path string) {
	if j := strings.IndexByte(target, '/'); j >= 0 {
		return target[:j], target[j:]
	}
	return target, ""
}

// injectSpec checks an inject entry without a credential reference, as
// flags give it.
func injectSpec(f injectFile) (Inject, error) {
	in := Inject{Env: f.Env, Path: f.Path, Header: f.Header}
	h, port, err := injectHost(f.Host)
	if err != nil {
		return in, err
	}
	in.Host, in.Port = h, port
	switch {
	case !ValidEnvName(f.Env):
		return in, fmt.Errorf("egress inject: bad variable name %q", f.Env)
	case ReservedEnv(f.Env):
		return in, fmt.Errorf("egress inject: %s is set by the server", f.Env)
	}
	if err := checkInjectPath(f.Path); err != nil {
		return in, err
	}
	form, err := injectForm(f.Form, f.Header)
	in.Form = form
	return in, err
}

// ParseInjectPresetSpec reads [VAR=]NAME[@HOST[:PORT][/PATH]] into the
// `inject` entry {preset: NAME, env: VAR, host: HOST[:PORT], path: /PATH}
// it stands for, without a credential reference: the preset is checked
// and expanded when the entry is (ParseEgress).
func ParseInjectPresetSpec(s string) (preset, env, host, path string, err error) {
	head, target, hasHost := strings.Cut(s, "@")
	preset = head
	if v, name, ok := strings.Cut(head, "="); ok {
		env, preset = v, name
		if env == "" {
			return "", "", "", "", fmt.Errorf("egress inject preset %q: VAR= names no variable", s)
		}
	}
	if hasHost {
		host, path = splitTarget(target)
		if host == "" {
			return "", "", "", "", fmt.Errorf("egress inject preset %q: @ names no host", s)
		}
	}
	return preset, env, host, path, nil
}

// injectPresetSpec is the injections of one InjectPresets entry: the
// preset expanded as in a policy (its hosts inspected), each entry
// checked as a flag's, to a host:port the allowlist lets through.
func injectPresetSpec(e *Egress, s string) ([]Inject, error) {
	preset, env, host, path, err := ParseInjectPresetSpec(s)
	if err != nil {
		return nil, err
	}
	fs, err := expandInjectPreset(e, injectFile{Preset: preset, Env: env, Host: host, Path: path})
	if err != nil {
		return nil, err
	}
	out := make([]Inject, 0, len(fs))
	for _, f := range fs {
		in, err := injectSpec(f)
		if err != nil {
			return nil, err
		}
		if !e.Allows(in.Host, cmpPort(in.Port)) {
			return nil, fmt.Errorf("egress inject: %s is not in the egress allowlist (the credential would go nowhere)", in.HostPort())
		}
		out = append(out, in)
	}
	return out, nil
}

// pinHostSpec reads NAME=IP into e.Hosts: an exact DNS name and an IP
// address without zone, as in `hosts`, at most maxPinnedAddrs a name.
func pinHostSpec(e *Egress, s string) error {
	name, addr, ok := strings.Cut(s, "=")
	if !ok {
		return fmt.Errorf("egress hosts %q: want NAME=IP", s)
	}
	hp, err := ParseHostPort(name)
	switch {
	case err != nil:
		return fmt.Errorf("egress hosts: %w", err)
	case hp.Suffix || hp.Port != 0:
		return fmt.Errorf("egress hosts: %q must be one host name, without wildcard or port", name)
	case len(e.Hosts[hp.Host]) >= maxPinnedAddrs:
		return fmt.Errorf("egress hosts: %s needs 1 to %d addresses", hp.Host, maxPinnedAddrs)
	}
	ip, err := netip.ParseAddr(addr)
	if err != nil || ip.Zone() != "" {
		return fmt.Errorf("egress hosts: %s: %q is not an IP address (no zone)", hp.Host, addr)
	}
	if e.Hosts == nil {
		e.Hosts = map[string][]netip.Addr{}
	}
	e.Hosts[hp.Host] = append(e.Hosts[hp.Host], ip.Unmap())
	return nil
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
