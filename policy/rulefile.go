package policy

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"regexp"
	"slices"
	"time"

	"go.yaml.in/yaml/v3"

	"coily.dev/coily/regularfile"
)

// ruleFile is one entry of `commands:` as written.
type ruleFile struct {
	Name           string            `yaml:"name"`
	Effect         string            `yaml:"effect"`
	Binary         binaryFile        `yaml:"binary"`
	SHA256         string            `yaml:"sha256"`
	Args           *[]string         `yaml:"args"`
	Flags          flagsFile         `yaml:"flags"`
	IfFlags        []string          `yaml:"if_flags"`
	Reason         string            `yaml:"reason"`
	Report         bool              `yaml:"report"`
	Env            []string          `yaml:"env"`
	PassEnv        []string          `yaml:"pass_env"`
	Credentials    yaml.Node         `yaml:"credentials"`
	Workspace      string            `yaml:"workspace"`
	Sandbox        string            `yaml:"sandbox"`
	Network        string            `yaml:"network"`
	Timeout        string            `yaml:"timeout"`
	MaxOutput      string            `yaml:"max_output"`
	Confirm        bool              `yaml:"confirm"`
	ConfirmTimeout string            `yaml:"confirm_timeout"`
	Rate           *rateFile         `yaml:"rate"`
	Concurrency    int               `yaml:"concurrency"`
	PerPrincipal   int               `yaml:"per_principal"`
	Writable       []string          `yaml:"writable"`
	Limits         *limitsFileFields `yaml:"limits"`
	Egress         *egressFile       `yaml:"egress"`
	CAFile         string            `yaml:"ca_file"`
	// Mapping is the rule's mapping; Sections, the values of its
	// registered section keys (readSections), the first of each. Other
	// keys land in Other, where readSections refuses them as unknown.
	Mapping  ruleMapping          `yaml:",inline"`
	Other    map[string]yaml.Node `yaml:",inline"`
	Sections map[string]yaml.Node `yaml:"-"`
}

type rateFile struct {
	PerMinute int `yaml:"per_minute"`
	Burst     int `yaml:"burst"`
}

// flagsFile is `flags:`: the word "any", or a map from flag to `true`
// (takes no value), a value glob, or a list of value globs.
type flagsFile struct {
	set   bool
	any   bool
	flags map[string]FlagSpec
}

func (f *flagsFile) UnmarshalYAML(n *yaml.Node) error {
	f.set = true
	switch n.Kind {
	case yaml.ScalarNode:
		if n.Tag == "!!str" && n.Value == "any" {
			f.any = true
			return nil
		}
	case yaml.MappingNode:
		f.flags = map[string]FlagSpec{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			name, v := n.Content[i].Value, n.Content[i+1]
			spec, ok := flagSpecOf(v)
			if !ok {
				return &yaml.TypeError{Errors: []string{fmt.Sprintf(
					"line %d: flag %s: want true (no value), a value pattern, or a list of value patterns", v.Line, name)}}
			}
			f.flags[name] = spec
		}
		return nil
	}
	return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: flags must be \"any\" or a map of flags", n.Line)}}
}

func flagSpecOf(v *yaml.Node) (FlagSpec, bool) {
	switch {
	case v.Kind == yaml.ScalarNode && v.Tag == "!!bool" && v.Value == "true":
		return FlagSpec{Bool: true}, true
	case v.Kind == yaml.ScalarNode && v.Tag == "!!str":
		return FlagSpec{Values: []string{v.Value}}, true
	case v.Kind == yaml.SequenceNode && len(v.Content) > 0:
		var vals []string
		for _, c := range v.Content {
			if c.Kind != yaml.ScalarNode || c.Tag != "!!str" {
				return FlagSpec{}, false
			}
			vals = append(vals, c.Value)
		}
		return FlagSpec{Values: vals}, true
	}
	return FlagSpec{}, false
}

var (
	envNamePattern = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,127}$`)
	sha256Pattern  = regexp.MustCompile(`^[0-9a-f]{64}$`)
)

// Defaults for rules and the server-wide limit.
const (
	DefaultConfirmTimeout = 5 * time.Minute
	DefaultConcurrency    = 1
	// MaxConcurrency bounds every concurrency cap.
	MaxConcurrency = 1024
	// WorkspaceTemp names the fresh temporary workspace each Exec gets.
	WorkspaceTemp = "temp"
)

// ruleNode gives positions inside one rule's mapping: the value node of a
// key when present, else the rule itself.
type ruleNode struct{ n *yaml.Node }

func (r ruleNode) at(key string) *yaml.Node {
	if c := child(r.n, key); c != nil {
		return c
	}
	return r.n
}

func (r ruleNode) has(key string) bool { return child(r.n, key) != nil }

func (b *builder) rules(p *Policy, rules []ruleFile) {
	seen := map[string]bool{}
	for i, rf := range rules {
		rn := ruleNode{b.at("commands", i)}
		switch {
		case !namePattern.MatchString(rf.Name):
			b.failAt(rn.at("name"), "command rule name %q must match %s", rf.Name, namePattern)
		case seen[rf.Name]:
			b.failAt(rn.at("name"), "duplicate command rule %q", rf.Name)
		}
		if err := rf.Binary.check(); err != nil {
			b.failAt(rn.at("binary"), "rule %q: %v", rf.Name, err)
		}
		seen[rf.Name] = true
		r := &Rule{Name: rf.Name, Candidates: rf.Binary, Line: rn.n.Line, Reason: rf.Reason, Report: rf.Report}
		b.ruleEffect(r, rf, rn)
		b.ruleArgs(r, rf, rn)
		if r.Effect == Allow {
			b.ruleExecution(p, r, rf, rn)
			b.ruleEgress(r, rf, rn)
			b.ruleSections(r, rf, AfterEgress)
			b.ruleCAFile(r, rf, rn)
			b.ruleLimits(p, r, rf, rn)
		}
		if rf.SHA256 != "" && !sha256Pattern.MatchString(rf.SHA256) {
			b.failAt(rn.at("sha256"), "rule %q: sha256 must be 64 lowercase hex digits", r.Name)
		}
		r.SHA256 = rf.SHA256
		r.Binary, r.Resolved, r.Absent = resolveCandidates(r.Candidates, r.SHA256)
		p.rules = append(p.rules, r)
		p.gitConfigWritable = p.gitConfigWritable || r.Effect == Allow && slices.Contains(r.Writable, ".git/config")
	}
}

// allowOnly are the keys of the core schema that only make sense on allow
// rules; so do every registered section's.
var allowOnly = []string{"flags", "env", "pass_env", "credentials", "workspace", "sandbox", "network", "timeout", "max_output",
	"confirm", "confirm_timeout", "rate", "concurrency", "per_principal", "writable", "limits", "egress",
	"ca_file"}

func (b *builder) ruleEffect(r *Rule, rf ruleFile, rn ruleNode) {
	switch rf.Effect {
	case "", "allow":
		r.Effect = Allow
		for _, k := range []string{"report", "reason"} {
			if rn.has(k) {
				b.failAt(rn.at(k), "rule %q: %s applies to deny rules only", r.Name, k)
			}
		}
	case "deny":
		r.Effect = Deny
		for _, k := range slices.Concat(allowOnly, sectionKeys()) {
			if rn.has(k) {
				b.failAt(rn.at(k), "rule %q: %s does not apply to a deny rule", r.Name, k)
			}
		}
	default:
		b.failAt(rn.at("effect"), "rule %q: effect must be allow or deny, got %q", r.Name, rf.Effect)
	}
}

// ruleArgs builds the argument spec. An allow rule without `args` accepts
// no positional arguments and without `flags` no flags; a deny rule without
// `args` matches any arguments.
func (b *builder) ruleArgs(r *Rule, rf ruleFile, rn ruleNode) {
	if rf.Args != nil {
		r.Args.Args = *rf.Args
	}
	r.Args.AnyFlags = rf.Flags.any
	r.Args.Flags = rf.Flags.flags
	r.Args.IfFlags = rf.IfFlags
	// Validate each key's part on its own, so the error points at the key
	// at fault; then the whole, for what spans keys.
	for _, part := range []struct {
		key  string
		spec ArgSpec
	}{
		{"args", ArgSpec{Args: r.Args.Args}},
		{"flags", ArgSpec{Flags: r.Args.Flags, AnyFlags: r.Args.AnyFlags}},
		{"if_flags", ArgSpec{IfFlags: r.Args.IfFlags}},
	} {
		if err := part.spec.Validate(); err != nil {
			b.failAt(rn.at(part.key), "rule %q: %v", r.Name, err)
			return
		}
	}
	// The whole, for what spans keys, on the rule's own spec: it records
	// that it passed, so that matching (concurrent) never writes to it.
	if err := r.Args.Validate(); err != nil {
		b.failAt(rn.at("args"), "rule %q: %v", r.Name, err)
		return
	}
	if r.Effect == Allow {
		if err := r.Args.ValidateAllow(); err != nil {
			b.failAt(rn.at("if_flags"), "rule %q: %v", r.Name, err)
		}
		// Without an approval, if_flags is what narrows the rule, and a
		// later flag may undo the one required (git push --dry-run
		// --no-dry-run pushes): flags: any would admit it.
		if r.Args.AnyFlags && len(r.Args.IfFlags) > 0 && !rf.Confirm {
			b.failAt(rn.at("if_flags"), "rule %q: if_flags on a rule without confirm needs its flags listed, not flags: any: any flag would let a later one undo the required one (--dry-run --no-dry-run)", r.Name)
		}
	}
}

// ruleExecution reads how an allowed command runs.
func (b *builder) ruleExecution(p *Policy, r *Rule, rf ruleFile, rn ruleNode) {
	r.Sandbox, r.Timeout, r.MaxOutput = rf.Sandbox, DefaultTimeout, DefaultMaxOutput
	if r.Sandbox == "" {
		r.Sandbox = defaultSandbox
	}
	if !slices.Contains([]string{SandboxNative, SandboxBwrap, SandboxSandboxExec}, r.Sandbox) {
		b.failAt(rn.at("sandbox"), "rule %q: unknown sandbox %q (want native, bwrap or sandbox-exec)", r.Name, rf.Sandbox)
	}
	switch r.Network = rf.Network; r.Network {
	case "":
		r.Network = NetworkDeny
	case NetworkDeny, NetworkLoopback, NetworkProxied, NetworkOpen:
	default:
		b.failAt(rn.at("network"), "rule %q: network must be deny, loopback, proxied or open, got %q", r.Name, rf.Network)
	}
	if rf.Timeout != "" {
		r.Timeout = b.duration(rn.at("timeout"), r.Name, "timeout", rf.Timeout)
	}
	if rf.MaxOutput != "" {
		v, err := ParseSize(rf.MaxOutput)
		if err != nil {
			b.failAt(rn.at("max_output"), "rule %q: %v", r.Name, err)
		}
		r.MaxOutput = v
	}
	b.envNames(r, rn, "env", rf.Env)
	b.envNames(r, rn, "pass_env", rf.PassEnv)
	r.Env, r.PassEnv = passEnvJoined(rf.Env, rf.PassEnv), rf.PassEnv
	b.ruleCredentials(r, rf, rn)
	b.ruleSections(r, rf, AfterCredentials)
	b.ruleWritable(r, rf, rn)
	r.Limits = b.resourceLimits(p.limits, rf.Limits, "commands", ruleIndex(b, rn), "limits")
	r.Workspace = rf.Workspace
	switch _, named := p.workspaces[r.Workspace]; {
	case r.Workspace == "":
		r.Workspace = WorkspaceTemp
	case r.Workspace != WorkspaceTemp && !named:
		b.failAt(rn.at("workspace"), "rule %q: workspace %q is neither %q nor defined under workspaces", r.Name, r.Workspace, WorkspaceTemp)
	}
}

// ruleLimits reads confirmation, rate and concurrency.
func (b *builder) ruleLimits(p *Policy, r *Rule, rf ruleFile, rn ruleNode) {
	r.Confirm = rf.Confirm
	r.ConfirmTimeout = DefaultConfirmTimeout
	if rf.ConfirmTimeout != "" {
		if !rf.Confirm {
			b.failAt(rn.at("confirm_timeout"), "rule %q: confirm_timeout needs confirm: true", r.Name)
		}
		r.ConfirmTimeout = b.duration(rn.at("confirm_timeout"), r.Name, "confirm_timeout", rf.ConfirmTimeout)
	}
	if rf.Rate != nil {
		r.Rate = &RateLimit{PerMinute: rf.Rate.PerMinute, Burst: rf.Rate.Burst}
		if r.Rate.Burst == 0 {
			r.Rate.Burst = r.Rate.PerMinute
		}
		if r.Rate.PerMinute < 1 || r.Rate.PerMinute > 1_000_000 || r.Rate.Burst < 1 || r.Rate.Burst > 1_000_000 {
			b.failAt(rn.at("rate"), "rule %q: rate needs per_minute (and optional burst) between 1 and 1000000", r.Name)
		}
	}
	if rf.Concurrency < 0 || rf.Concurrency > MaxConcurrency {
		b.failAt(rn.at("concurrency"), "rule %q: concurrency must be between 1 and %d (or unset)", r.Name, MaxConcurrency)
	}
	r.Concurrency = rf.Concurrency
	b.rulePerPrincipal(p, r, rf, rn)
}

// rulePerPrincipal reads a rule's per_principal: a cap on one principal's
// commands of this rule, tighter than limits.per_principal and the rule's
// own concurrency.
func (b *builder) rulePerPrincipal(p *Policy, r *Rule, rf ruleFile, rn ruleNode) {
	if !rn.has("per_principal") {
		return
	}
	limit, what := p.perPrincipal, "limits.per_principal"
	if r.Concurrency > 0 && r.Concurrency < limit {
		limit, what = r.Concurrency, "its concurrency"
	}
	if rf.PerPrincipal < 1 || rf.PerPrincipal > limit {
		b.failAt(rn.at("per_principal"), "rule %q: per_principal must be between 1 and %s (%d), got %d", r.Name, what, limit, rf.PerPrincipal)
	}
	r.PerPrincipal = rf.PerPrincipal
}

func (b *builder) duration(n *yaml.Node, rule, key, s string) time.Duration {
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 || d > MaxTimeout {
		b.failAt(n, "rule %q: %s %q must be a duration between 1ns and %s", rule, key, s, MaxTimeout)
	}
	return d
}

func ruleIndex(b *builder, rn ruleNode) int {
	return slices.Index(b.at("commands").Content, rn.n)
}

// ErrDigest reports a binary whose SHA-256 differs from the rule's pin.
var ErrDigest = errors.New("binary digest mismatch")

// resolveBinary resolves symbolic links in an absolute binary path and
// checks the pinned digest, if any. A binary that does not exist is not an
// error for loading (the rule simply cannot match here) but is reported by
// `coily policy check`.
func resolveBinary(path, pin string) (string, error) {
	resolved, err := filepath.EvalSymlinks(path)
	if err != nil {
		return "", fmt.Errorf("binary %s is not on this host: %w", path, err)
	}
	f, _, err := regularfile.Open(resolved)
	if err != nil {
		// A FIFO at the binary's path opens at once and is refused here,
		// before its digest is read.
		return "", fmt.Errorf("binary %s (%s) is not a regular file", path, resolved)
	}
	defer f.Close()
	if pin == "" {
		return resolved, nil
	}
	sum, err := readerSHA256(f)
	if err != nil {
		return "", fmt.Errorf("binary %s: %w", path, err)
	}
	if sum != pin {
		return "", fmt.Errorf("%w: %s has sha256 %s, the rule pins %s", ErrDigest, resolved, sum, pin)
	}
	return resolved, nil
}

func readerSHA256(f io.Reader) (string, error) {
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
