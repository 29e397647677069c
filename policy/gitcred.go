package policy

import (
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"coily.dev/coily/gitcred"
	"coily.dev/coily/keystore/credref"
)

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

// gitUsernamePattern is what a `git_credentials` user name may be.
var gitUsernamePattern = regexp.MustCompile(`^[A-Za-z0-9._@+~-]{1,128}$`)

// ruleGitCredentials reads `git_credentials:`, a list of {host, username,
// password}. git over https needs the network, and the helper is the
// coily executable the bwrap sandbox binds in proxied mode: the rule must
// have both.
func (b *builder) ruleGitCredentials(r *Rule, rf ruleFile, rn ruleNode) {
	n := &rf.GitCredentials
	if n.Kind == 0 {
		return
	}
	at := rn.at("git_credentials")
	switch {
	case n.Kind != yaml.SequenceNode || len(n.Content) == 0:
		b.failAt(at, "rule %q: git_credentials must be a list of {host, username, password}", r.Name)
		return
	case len(n.Content) > gitcred.MaxCredentials:
		b.failAt(at, "rule %q: git_credentials lists more than %d hosts", r.Name, gitcred.MaxCredentials)
		return
	case r.Network != NetworkProxied:
		b.failAt(at, "rule %q: git_credentials needs network: proxied (git reaches the hosts through the egress proxy), got network %q", r.Name, r.Network)
		return
	case r.Sandbox != SandboxBwrap:
		b.failAt(at, "rule %q: git_credentials needs sandbox bwrap (its helper runs inside the bwrap sandbox), got sandbox %q", r.Name, r.Sandbox)
		return
	}
	for _, e := range n.Content {
		g, ok := b.gitCredential(r.Name, e)
		if !ok {
			return
		}
		if slices.ContainsFunc(r.GitCredentials, func(o GitCredential) bool { return o.Host == g.Host && o.Port == g.Port }) {
			b.failAt(child(e, "host"), "rule %q: git_credentials: %s is listed twice", r.Name, g.Address())
			return
		}
		r.GitCredentials = append(r.GitCredentials, g)
	}
}

// gitCredential reads one entry of git_credentials.
func (b *builder) gitCredential(rule string, e *yaml.Node) (GitCredential, bool) {
	if e.Kind != yaml.MappingNode {
		b.failAt(e, "rule %q: git_credentials: each entry is {host, username, password}", rule)
		return GitCredential{}, false
	}
	g := GitCredential{Username: gitcred.DefaultUsername}
	seen := map[string]bool{}
	for i := 0; i+1 < len(e.Content); i += 2 {
		k, v := e.Content[i], e.Content[i+1]
		if seen[k.Value] {
			b.failAt(k, "rule %q: git_credentials: %s given twice", rule, k.Value)
			return g, false
		}
		seen[k.Value] = true
		if !slices.Contains([]string{"host", "username", "password"}, k.Value) {
			b.failAt(k, "rule %q: git_credentials: unknown key %q (want host, username, password)", rule, k.Value)
			return g, false
		}
		if v.Kind != yaml.ScalarNode || v.Tag != "!!str" {
			b.failAt(v, "rule %q: git_credentials: %s must be a string", rule, k.Value)
			return g, false
		}
		if !b.gitCredentialField(rule, &g, k.Value, v) {
			return g, false
		}
	}
	for _, key := range []string{"host", "password"} {
		if !seen[key] {
			b.failAt(e, "rule %q: git_credentials: an entry needs %s", rule, key)
			return g, false
		}
	}
	return g, true
}

// gitCredentialField sets one field of g from its node v.
func (b *builder) gitCredentialField(rule string, g *GitCredential, key string, v *yaml.Node) bool {
	switch key {
	case "host":
		hp, err := ParseHostPort(v.Value)
		switch {
		case strings.Contains(v.Value, "/") || strings.Contains(v.Value, "@"):
			b.failAt(v, "rule %q: git_credentials host %q: write HOST[:PORT], not a URL", rule, v.Value)
			return false
		case err != nil:
			b.failAt(v, "rule %q: git_credentials host: %v", rule, err)
			return false
		case hp.Suffix:
			b.failAt(v, "rule %q: git_credentials host %q: one exact host, not a wildcard", rule, v.Value)
			return false
		}
		g.Host, g.Port = hp.Host, hp.Port
		if g.Port == 0 {
			g.Port = gitcred.DefaultPort
		}
	case "username":
		if !gitUsernamePattern.MatchString(v.Value) {
			b.failAt(v, "rule %q: git_credentials username %q must match %s", rule, v.Value, gitUsernamePattern)
			return false
		}
		g.Username = v.Value
	case "password":
		ref, err := credref.Parse(v.Value)
		if err != nil {
			b.failAt(v, "rule %q: git_credentials password: %v", rule, err)
			return false
		}
		g.Password = ref
	}
	return true
}

// ruleCAFile reads `ca_file:`, the owner's PEM bundle that the command
// trusts instead of the system's; the bwrap sandbox binds it by
// descriptor (sandbox.CAPath).
func (b *builder) ruleCAFile(r *Rule, rf ruleFile, rn ruleNode) {
	if !rn.has("ca_file") {
		return
	}
	at := rn.at("ca_file")
	switch {
	case !filepath.IsAbs(rf.CAFile) || filepath.Clean(rf.CAFile) != rf.CAFile:
		b.failAt(at, "rule %q: ca_file must be a clean absolute path, got %q", r.Name, rf.CAFile)
	case r.Sandbox != SandboxBwrap:
		b.failAt(at, "rule %q: ca_file needs sandbox bwrap, got sandbox %q", r.Name, r.Sandbox)
	}
	r.CAFile = rf.CAFile
}

// GitCredentialsUnreachable lists the git_credentials addresses an
// enforced egress proxy would refuse: git could not reach them.
func (r *Rule) GitCredentialsUnreachable() []string {
	if len(r.GitCredentials) == 0 || r.Egress != nil && r.Egress.Mode == EgressObserve {
		return nil
	}
	var out []string
	for _, g := range r.GitCredentials {
		if !slices.ContainsFunc(r.Egress.Effective(), func(hp HostPort) bool { return hp.Match(g.Host, g.Port) }) {
			out = append(out, g.Address())
		}
	}
	return out
}
