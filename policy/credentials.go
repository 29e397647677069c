package policy

import (
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"coily.dev/coily/keystore/credref"
	"coily.dev/coily/sandbox"
)

// reservedEnv are the variables the server sets in a child's environment
// (with ca_file: sandbox.CAEnv too; with an ssh agent: SSH_AUTH_SOCK); a
// credential may not take their place.
var reservedEnv = append([]string{"PATH", "HOME", "TMPDIR", "LANG", "TZ", "TERM", "GIT_ALLOW_PROTOCOL", "SSH_AUTH_SOCK",
	"HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "all_proxy", "no_proxy"},
	sandbox.CAEnv...)

// reservedEnvPrefixes are families the server sets or uses: the locale,
// coily's credential helper's (COILY_GIT_*), git's configuration
// (GIT_CONFIG_COUNT, _KEY_n, _VALUE_n name the helper) and the names the
// server fetches the private keys of ssh agents and GitHub Apps under
// and the credentials the egress proxy injects (COILY_SSH_*,
// COILY_GITHUB_*, COILY_INJECT_*, never in the environment).
var reservedEnvPrefixes = []string{"LC_", "COILY_GIT_", "COILY_SSH_", "COILY_GITHUB_", "COILY_INJECT_", "GIT_CONFIG"}

// ValidEnvName reports whether name may name a variable of a rule (env,
// credentials, a section's variables).
func ValidEnvName(name string) bool { return envNamePattern.MatchString(name) }

// ReservedEnv reports whether the server sets or uses the variable name:
// no credential, nor a section's variable, may take its place.
func ReservedEnv(name string) bool {
	return slices.Contains(reservedEnv, name) || slices.ContainsFunc(reservedEnvPrefixes, func(p string) bool { return strings.HasPrefix(name, p) })
}

// ruleCredentials reads `credentials:`, a map from the child's environment
// variable to a credential reference (credref.Parse).
func (b *builder) ruleCredentials(r *Rule, rf ruleFile, rn ruleNode) {
	n := &rf.Credentials
	if n.Kind == 0 {
		return
	}
	if n.Kind != yaml.MappingNode {
		b.failAt(rn.at("credentials"), "rule %q: credentials must map environment variables to references", r.Name)
		return
	}
	r.Credentials = map[string]credref.Ref{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		name := k.Value
		switch {
		case k.Kind != yaml.ScalarNode || !envNamePattern.MatchString(name):
			b.failAt(k, "rule %q: bad credential variable name %q", r.Name, name)
			continue
		case ReservedEnv(name):
			b.failAt(k, "rule %q: credential variable %s is set by the server", r.Name, name)
			continue
		case slices.Contains(r.Env, name):
			b.failAt(k, "rule %q: %s is both a credential and a variable callers may pass", r.Name, name)
			continue
		case r.Credentials[name] != (credref.Ref{}):
			b.failAt(k, "rule %q: duplicate credential %s", r.Name, name)
			continue
		case v.Kind != yaml.ScalarNode || v.Tag != "!!str":
			b.failAt(v, "rule %q: credential %s: want a reference such as vault:secret/coily/github#token", r.Name, name)
			continue
		}
		ref, err := credref.Parse(v.Value)
		if err != nil {
			b.failAt(v, "rule %q: credential %s: %v", r.Name, name, err)
			continue
		}
		r.Credentials[name] = ref
	}
}
