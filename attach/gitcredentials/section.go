package gitcredentials

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"coily.dev/coily/gitcred"
	"coily.dev/coily/keystore/credref"
	"coily.dev/coily/policy"
)

// Key is the rule's key this package reads.
const Key = "git_credentials"

func init() { policy.RegisterSection(section{}) }

// GitCredential is one entry of a rule's `git_credentials:`: what git
// inside the sandbox gets from coily's credential helper for one https
// host (package gitcred), and nowhere else.
type GitCredential struct {
	// Host is an exact DNS name in lower case; Port its https port (443
	// when the entry names none).
	Host string
	Port int
	// Username is sent with the password (gitcred.DefaultUsername when
	// the entry names none).
	Username string
	// Password is the credential reference the server fetches.
	Password credref.Ref
}

// Address is "host:port".
func (g GitCredential) Address() string { return fmt.Sprintf("%s:%d", g.Host, g.Port) }

// Of are the rule's git credentials, one per host; none without the key.
func Of(r *policy.Rule) []GitCredential {
	l, _ := r.Section(Key).([]GitCredential)
	return l
}

// section reads `git_credentials:`.
type section struct{}

func (section) Key() string         { return Key }
func (section) Stage() policy.Stage { return policy.AfterEgress }

// Backends are those of the passwords.
func (section) Backends(r *policy.Rule) []string {
	var out []string
	for _, g := range Of(r) {
		out = append(out, g.Password.Backend)
	}
	return out
}

// gitUsernamePattern is what a `git_credentials` user name may be.
var gitUsernamePattern = regexp.MustCompile(`^[A-Za-z0-9._@+~-]{1,128}$`)

// Parse reads `git_credentials:`, a list of {host, username, password}.
// git over https needs the network, and the helper is the coily
// executable the bwrap sandbox binds in proxied mode: the rule must have
// both.
func (section) Parse(p *policy.SectionParser, n *yaml.Node) any {
	r := p.Rule
	switch {
	case n.Kind != yaml.SequenceNode || len(n.Content) == 0:
		p.FailAt(n, "rule %q: git_credentials must be a list of {host, username, password}", r.Name)
		return nil
	case len(n.Content) > gitcred.MaxCredentials:
		p.FailAt(n, "rule %q: git_credentials lists more than %d hosts", r.Name, gitcred.MaxCredentials)
		return nil
	case r.Network != policy.NetworkProxied:
		p.FailAt(n, "rule %q: git_credentials needs network: proxied (git reaches the hosts through the egress proxy), got network %q", r.Name, r.Network)
		return nil
	case r.Sandbox != policy.SandboxBwrap:
		p.FailAt(n, "rule %q: git_credentials needs sandbox bwrap (its helper runs inside the bwrap sandbox), got sandbox %q", r.Name, r.Sandbox)
		return nil
	}
	var out []GitCredential
	for _, e := range n.Content {
		g, ok := gitCredential(p, r.Name, e)
		if !ok {
			return nil
		}
		if slices.ContainsFunc(out, func(o GitCredential) bool { return o.Host == g.Host && o.Port == g.Port }) {
			p.FailAt(policy.MapValue(e, "host"), "rule %q: git_credentials: %s is listed twice", r.Name, g.Address())
			return nil
		}
		out = append(out, g)
	}
	return out
}

// gitCredential reads one entry of git_credentials.
func gitCredential(p *policy.SectionParser, rule string, e *yaml.Node) (GitCredential, bool) {
	if e.Kind != yaml.MappingNode {
		p.FailAt(e, "rule %q: git_credentials: each entry is {host, username, password}", rule)
		return GitCredential{}, false
	}
	g := GitCredential{Username: gitcred.DefaultUsername}
	seen := map[string]bool{}
	for i := 0; i+1 < len(e.Content); i += 2 {
		k, v := e.Content[i], e.Content[i+1]
		if seen[k.Value] {
			p.FailAt(k, "rule %q: git_credentials: %s given twice", rule, k.Value)
			return g, false
		}
		seen[k.Value] = true
		if !slices.Contains([]string{"host", "username", "password"}, k.Value) {
			p.FailAt(k, "rule %q: git_credentials: unknown key %q (want host, username, password)", rule, k.Value)
			return g, false
		}
		if v.Kind != yaml.ScalarNode || v.Tag != "!!str" {
			p.FailAt(v, "rule %q: git_credentials: %s must be a string", rule, k.Value)
			return g, false
		}
		if !gitCredentialField(p, rule, &g, k.Value, v) {
			return g, false
		}
	}
	for _, key := range []string{"host", "password"} {
		if !seen[key] {
			p.FailAt(e, "rule %q: git_credentials: an entry needs %s", rule, key)
			return g, false
		}
	}
	return g, true
}

// gitCredentialField sets one field of g from its node v.
func gitCredentialField(p *policy.SectionParser, rule string, g *GitCredential, key string, v *yaml.Node) bool {
	switch key {
	case "host":
		hp, err := policy.ParseHostPort(v.Value)
		switch {
		case strings.Contains(v.Value, "/") || strings.Contains(v.Value, "@"):
			p.FailAt(v, "rule %q: git_credentials host %q: write HOST[:PORT], not a URL", rule, v.Value)
			return false
		case err != nil:
			p.FailAt(v, "rule %q: git_credentials host: %v", rule, err)
			return false
		case hp.Suffix:
			p.FailAt(v, "rule %q: git_credentials host %q: one exact host, not a wildcard", rule, v.Value)
			return false
		}
		g.Host, g.Port = hp.Host, hp.Port
		if g.Port == 0 {
			g.Port = gitcred.DefaultPort
		}
	case "username":
		if !gitUsernamePattern.MatchString(v.Value) {
			p.FailAt(v, "rule %q: git_credentials username %q must match %s", rule, v.Value, gitUsernamePattern)
			return false
		}
		g.Username = v.Value
	case "password":
		ref, err := credref.Parse(v.Value)
		if err != nil {
			p.FailAt(v, "rule %q: git_credentials password: %v", rule, err)
			return false
		}
		g.Password = ref
	}
	return true
}

// Unreachable lists the rule's git_credentials addresses an enforced
// egress proxy would refuse: git could not reach them.
func Unreachable(r *policy.Rule) []string {
	creds := Of(r)
	if len(creds) == 0 || r.Egress != nil && r.Egress.Mode == policy.EgressObserve {
		return nil
	}
	var out []string
	for _, g := range creds {
		if !slices.ContainsFunc(r.Egress.Effective(), func(hp policy.HostPort) bool { return hp.Match(g.Host, g.Port) }) {
			out = append(out, g.Address())
		}
	}
	return out
}

// Notes explain the rule's git_credentials for `coily policy check`: one
// line per host, and a warning for each one its enforced egress would
// refuse.
func Notes(r *policy.Rule) []string {
	var lines []string
	for _, g := range Of(r) {
		lines = append(lines, fmt.Sprintf("rule %q git_credentials: git gets user %s and %s for https://%s, from coily's credential helper only",
			r.Name, g.Username, g.Password, g.Address()))
	}
	for _, addr := range Unreachable(r) {
		lines = append(lines, fmt.Sprintf("warning: rule %q has git_credentials for %s, which its egress allowlist does not allow: git cannot reach it (add %s to egress.allow)", r.Name, addr, addr))
	}
	return lines
}
