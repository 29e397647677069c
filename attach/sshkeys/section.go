package sshkeys

import (
	"fmt"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"coily.dev/coily/keystore/credref"
	"coily.dev/coily/policy"
)

// Key is the rule's key this package reads.
const Key = "ssh_keys"

func init() { policy.RegisterSection(section{}) }

// Bounds of a rule's `ssh_keys:`.
const (
	// MaxSSHKeys bounds the keys one rule may name.
	MaxSSHKeys = 8
	// maxSSHKeyHosts bounds the hosts one key may be used for.
	maxSSHKeyHosts = 16
)

// SSHKey is one entry of a rule's `ssh_keys:`: a private key the server
// fetches and offers to ssh inside the sandbox through an ssh agent that
// signs only for sessions with the hosts named here (package sshagent).
// The key itself never enters the sandbox.
type SSHKey struct {
	// Key is the credential reference of the private key.
	Key credref.Ref
	// Hosts are the hosts the key is for, each pinned in the rule's
	// egress.ssh_known_hosts and reachable under its allowlist.
	Hosts []policy.SSHHost
}

// HostList is the key's hosts as written, comma-separated.
func (k SSHKey) HostList() string {
	hosts := make([]string, len(k.Hosts))
	for i, h := range k.Hosts {
		hosts[i] = h.String()
	}
	return strings.Join(hosts, ",")
}

// Of are the private keys ssh inside the rule's sandbox may use through
// coily's ssh agent, each for its hosts only; none without the key.
func Of(r *policy.Rule) []SSHKey {
	l, _ := r.Section(Key).([]SSHKey)
	return l
}

// Pins are the pinned host keys of k's hosts in r's egress, without
// repeats: the host keys of the sessions the agent may sign for with k.
func Pins(r *policy.Rule, k SSHKey) []policy.KnownHost {
	var out []policy.KnownHost
	for _, h := range k.Hosts {
		for _, p := range r.Egress.PinsFor(h) {
			if !slices.ContainsFunc(out, func(o policy.KnownHost) bool { return o.KeyType == p.KeyType && o.Key == p.Key }) {
				out = append(out, p)
			}
		}
	}
	return out
}

// Notes explain the rule's ssh_keys for `coily policy check`: one line
// per key, with the hosts it signs for and the fingerprints of their
// pinned host keys.
func Notes(r *policy.Rule) []string {
	var lines []string
	for _, k := range Of(r) {
		var fps []string
		for _, p := range Pins(r, k) {
			fps = append(fps, p.Fingerprint)
		}
		lines = append(lines, fmt.Sprintf("rule %q ssh_keys: ssh gets %s through coily's agent, which signs only for %s (host keys %s); the key never enters the sandbox",
			r.Name, k.Key, k.HostList(), strings.Join(fps, ", ")))
	}
	return lines
}

// section reads `ssh_keys:`.
type section struct{}

func (section) Key() string         { return Key }
func (section) Stage() policy.Stage { return policy.AfterEgress }

// Backends are those of the keys.
func (section) Backends(r *policy.Rule) []string {
	var out []string
	for _, k := range Of(r) {
		out = append(out, k.Key.Backend)
	}
	return out
}

// sshKeyFields are the keys of one `ssh_keys` entry.
var sshKeyFields = []string{"key", "hosts"}

// Parse reads `ssh_keys:`, a list of {key, hosts}. ssh needs the
// network, and the agent's socket is bound by the bwrap sandbox in
// proxied mode: the rule must have both. Each host must have a pinned
// host key (the agent signs only for sessions whose host key it can
// check) and be reachable under the egress allowlist, read before.
func (section) Parse(p *policy.SectionParser, n *yaml.Node) any {
	r := p.Rule
	switch {
	case n.Kind != yaml.SequenceNode || len(n.Content) == 0:
		p.FailAt(n, "rule %q: ssh_keys must be a list of {key, hosts}", r.Name)
		return nil
	case len(n.Content) > MaxSSHKeys:
		p.FailAt(n, "rule %q: ssh_keys lists more than %d keys", r.Name, MaxSSHKeys)
		return nil
	case r.Network != policy.NetworkProxied:
		p.FailAt(n, "rule %q: ssh_keys needs network: proxied (ssh reaches the hosts through the egress proxy), got network %q", r.Name, r.Network)
		return nil
	case r.Sandbox != policy.SandboxBwrap:
		p.FailAt(n, "rule %q: ssh_keys needs sandbox bwrap (it binds the agent's socket), got sandbox %q", r.Name, r.Sandbox)
		return nil
	}
	var out []SSHKey
	for _, e := range n.Content {
		k, ok := sshKey(p, e)
		if !ok {
			return nil
		}
		if slices.ContainsFunc(out, func(o SSHKey) bool { return o.Key == k.Key }) {
			p.FailAt(policy.MapValue(e, "key"), "rule %q: ssh_keys: key %s is listed twice", r.Name, k.Key)
			return nil
		}
		for _, h := range k.Hosts {
			if slices.ContainsFunc(out, func(o SSHKey) bool { return slices.Contains(o.Hosts, h) }) {
				p.FailAt(policy.MapValue(e, "hosts"), "rule %q: ssh_keys: host %s has two keys (one key per host)", r.Name, h)
				return nil
			}
		}
		out = append(out, k)
	}
	return out
}

// sshKey reads one entry of ssh_keys.
func sshKey(p *policy.SectionParser, e *yaml.Node) (SSHKey, bool) {
	r := p.Rule
	var k SSHKey
	if e.Kind != yaml.MappingNode {
		p.FailAt(e, "rule %q: ssh_keys: each entry is {key, hosts}", r.Name)
		return k, false
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(e.Content); i += 2 {
		name, v := e.Content[i], e.Content[i+1]
		switch {
		case seen[name.Value]:
			p.FailAt(name, "rule %q: ssh_keys: %s given twice", r.Name, name.Value)
			return k, false
		case !slices.Contains(sshKeyFields, name.Value):
			p.FailAt(name, "rule %q: ssh_keys: unknown key %q (want key, hosts)", r.Name, name.Value)
			return k, false
		}
		seen[name.Value] = true
		ok := false
		if name.Value == "key" {
			k.Key, ok = sshKeyRef(p, r.Name, v)
		} else {
			k.Hosts, ok = sshKeyHosts(p, r, v)
		}
		if !ok {
			return k, false
		}
	}
	for _, f := range sshKeyFields {
		if !seen[f] {
			p.FailAt(e, "rule %q: ssh_keys: an entry needs %s", r.Name, f)
			return k, false
		}
	}
	return k, true
}

// sshKeyRef reads an entry's `key`: a credential reference.
func sshKeyRef(p *policy.SectionParser, rule string, v *yaml.Node) (credref.Ref, bool) {
	if v.Kind != yaml.ScalarNode || v.Tag != "!!str" {
		p.FailAt(v, "rule %q: ssh_keys: key must be a reference such as vault:secret/coily/deploy#private_key", rule)
		return credref.Ref{}, false
	}
	if strings.Contains(v.Value, "PRIVATE KEY") || strings.ContainsAny(v.Value, "\n\r") {
		// Never echo what may be a private key pasted in place of its
		// reference: errors reach logs and terminals.
		p.FailAt(v, "rule %q: ssh_keys key: this is a private key, not a reference to one: store it in Vault or the keychain and name it here (vault:secret/coily/deploy#private_key)", rule)
		return credref.Ref{}, false
	}
	ref, err := credref.Parse(v.Value)
	if err != nil {
		p.FailAt(v, "rule %q: ssh_keys key: %v", rule, err)
		return credref.Ref{}, false
	}
	return ref, true
}

// sshKeyHosts reads an entry's `hosts`: hosts as ssh_known_hosts names
// them (`host`, `[host]:port`), each pinned and reachable.
func sshKeyHosts(p *policy.SectionParser, r *policy.Rule, v *yaml.Node) ([]policy.SSHHost, bool) {
	if v.Kind != yaml.SequenceNode || len(v.Content) == 0 || len(v.Content) > maxSSHKeyHosts {
		p.FailAt(v, "rule %q: ssh_keys: hosts must be a list of 1 to %d hosts (host, or [host]:port)", r.Name, maxSSHKeyHosts)
		return nil, false
	}
	var out []policy.SSHHost
	for _, hn := range v.Content {
		if hn.Kind != yaml.ScalarNode || hn.Tag != "!!str" {
			p.FailAt(hn, "rule %q: ssh_keys: each host is a string (host, or [host]:port)", r.Name)
			return nil, false
		}
		h, err := policy.ParseSSHHost(hn.Value)
		switch {
		case err != nil:
			p.FailAt(hn, "rule %q: ssh_keys host: %v", r.Name, err)
			return nil, false
		case slices.Contains(out, h):
			p.FailAt(hn, "rule %q: ssh_keys: host %s is listed twice", r.Name, h)
			return nil, false
		case len(r.Egress.PinsFor(h)) == 0:
			p.FailAt(hn, "rule %q: ssh_keys host %s has no host key in egress.ssh_known_hosts: the agent signs only for a session whose host key the rule pins", r.Name, h)
			return nil, false
		case !r.Egress.ReachesSSH(h):
			p.FailAt(hn, "rule %q: ssh_keys host %s is not reachable under the egress allowlist (%s)", r.Name, h, policy.ReachHint(h))
			return nil, false
		}
		out = append(out, h)
	}
	return out, true
}
