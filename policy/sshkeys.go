package policy

import (
	"encoding/base64"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
	"golang.org/x/crypto/ssh"

	"coily.dev/coily/keystore/credref"
)

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
	Hosts []SSHHost
}

// HostList is the key's hosts as written, comma-separated.
func (k SSHKey) HostList() string {
	hosts := make([]string, len(k.Hosts))
	for i, h := range k.Hosts {
		hosts[i] = h.String()
	}
	return strings.Join(hosts, ",")
}

// sshKeyFields are the keys of one `ssh_keys` entry.
var sshKeyFields = []string{"key", "hosts"}

// ruleSSHKeys reads `ssh_keys:`, a list of {key, hosts}. ssh needs the
// network, and the agent's socket is bound by the bwrap sandbox in proxied
// mode: the rule must have both. Each host must have a pinned host key
// (the agent signs only for sessions whose host key it can check) and be
// reachable under the egress allowlist. It runs after ruleEgress.
func (b *builder) ruleSSHKeys(r *Rule, rf ruleFile, rn ruleNode) {
	n := &rf.SSHKeys
	if n.Kind == 0 {
		return
	}
	at := rn.at("ssh_keys")
	switch {
	case n.Kind != yaml.SequenceNode || len(n.Content) == 0:
		b.failAt(at, "rule %q: ssh_keys must be a list of {key, hosts}", r.Name)
		return
	case len(n.Content) > MaxSSHKeys:
		b.failAt(at, "rule %q: ssh_keys lists more than %d keys", r.Name, MaxSSHKeys)
		return
	case r.Network != NetworkProxied:
		b.failAt(at, "rule %q: ssh_keys needs network: proxied (ssh reaches the hosts through the egress proxy), got network %q", r.Name, r.Network)
		return
	case r.Sandbox != SandboxBwrap:
		b.failAt(at, "rule %q: ssh_keys needs sandbox bwrap (it binds the agent's socket), got sandbox %q", r.Name, r.Sandbox)
		return
	}
	for _, e := range n.Content {
		k, ok := b.sshKey(r, e)
		if !ok {
			return
		}
		if slices.ContainsFunc(r.SSHKeys, func(o SSHKey) bool { return o.Key == k.Key }) {
			b.failAt(child(e, "key"), "rule %q: ssh_keys: key %s is listed twice", r.Name, k.Key)
			return
		}
		for _, h := range k.Hosts {
			if slices.ContainsFunc(r.SSHKeys, func(o SSHKey) bool { return slices.Contains(o.Hosts, h) }) {
				b.failAt(child(e, "hosts"), "rule %q: ssh_keys: host %s has two keys (one key per host)", r.Name, h)
				return
			}
		}
		r.SSHKeys = append(r.SSHKeys, k)
	}
}

// sshKey reads one entry of ssh_keys.
func (b *builder) sshKey(r *Rule, e *yaml.Node) (SSHKey, bool) {
	var k SSHKey
	if e.Kind != yaml.MappingNode {
		b.failAt(e, "rule %q: ssh_keys: each entry is {key, hosts}", r.Name)
		return k, false
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(e.Content); i += 2 {
		name, v := e.Content[i], e.Content[i+1]
		switch {
		case seen[name.Value]:
			b.failAt(name, "rule %q: ssh_keys: %s given twice", r.Name, name.Value)
			return k, false
		case !slices.Contains(sshKeyFields, name.Value):
			b.failAt(name, "rule %q: ssh_keys: unknown key %q (want key, hosts)", r.Name, name.Value)
			return k, false
		}
		seen[name.Value] = true
		ok := false
		if name.Value == "key" {
			k.Key, ok = b.sshKeyRef(r.Name, v)
		} else {
			k.Hosts, ok = b.sshKeyHosts(r, v)
		}
		if !ok {
			return k, false
		}
	}
	for _, f := range sshKeyFields {
		if !seen[f] {
			b.failAt(e, "rule %q: ssh_keys: an entry needs %s", r.Name, f)
			return k, false
		}
	}
	return k, true
}

// sshKeyRef reads an entry's `key`: a credential reference.
func (b *builder) sshKeyRef(rule string, v *yaml.Node) (credref.Ref, bool) {
	if v.Kind != yaml.ScalarNode || v.Tag != "!!str" {
		b.failAt(v, "rule %q: ssh_keys: key must be a reference such as vault:secret/coily/deploy#private_key", rule)
		return credref.Ref{}, false
	}
	if strings.Contains(v.Value, "PRIVATE KEY") || strings.ContainsAny(v.Value, "\n\r") {
		// Never echo what may be a private key pasted in place of its
		// reference: errors reach logs and terminals.
		b.failAt(v, "rule %q: ssh_keys key: this is a private key, not a reference to one: store it in Vault or the keychain and name it here (vault:secret/coily/deploy#private_key)", rule)
		return credref.Ref{}, false
	}
	ref, err := credref.Parse(v.Value)
	if err != nil {
		b.failAt(v, "rule %q: ssh_keys key: %v", rule, err)
		return credref.Ref{}, false
	}
	return ref, true
}

// sshKeyHosts reads an entry's `hosts`: hosts as ssh_known_hosts names
// them (`host`, `[host]:port`), each pinned and reachable.
func (b *builder) sshKeyHosts(r *Rule, v *yaml.Node) ([]SSHHost, bool) {
	if v.Kind != yaml.SequenceNode || len(v.Content) == 0 || len(v.Content) > maxSSHKeyHosts {
		b.failAt(v, "rule %q: ssh_keys: hosts must be a list of 1 to %d hosts (host, or [host]:port)", r.Name, maxSSHKeyHosts)
		return nil, false
	}
	var out []SSHHost
	for _, hn := range v.Content {
		if hn.Kind != yaml.ScalarNode || hn.Tag != "!!str" {
			b.failAt(hn, "rule %q: ssh_keys: each host is a string (host, or [host]:port)", r.Name)
			return nil, false
		}
		h, err := parseSSHHost(hn.Value)
		switch {
		case err != nil:
			b.failAt(hn, "rule %q: ssh_keys host: %v", r.Name, err)
			return nil, false
		case slices.Contains(out, h):
			b.failAt(hn, "rule %q: ssh_keys: host %s is listed twice", r.Name, h)
			return nil, false
		case len(r.Egress.PinsFor(h)) == 0:
			b.failAt(hn, "rule %q: ssh_keys host %s has no host key in egress.ssh_known_hosts: the agent signs only for a session whose host key the rule pins", r.Name, h)
			return nil, false
		case !r.Egress.ReachesSSH(h):
			b.failAt(hn, "rule %q: ssh_keys host %s is not reachable under the egress allowlist (%s)", r.Name, h, ReachHint(h))
			return nil, false
		}
		out = append(out, h)
	}
	return out, true
}

// PinsFor is the pinned host keys (ssh_known_hosts lines) that name h.
func (e *Egress) PinsFor(h SSHHost) []KnownHost {
	if e == nil {
		return nil
	}
	var out []KnownHost
	for _, k := range e.SSHKnownHosts {
		if slices.Contains(k.Hosts, h) {
			out = append(out, k)
		}
	}
	return out
}

// ReachesSSH reports whether the egress block lets ssh reach h: any host
// in observe mode; otherwise a name through the allowlist, an address
// through allow_cidrs (as the proxy decides). A nil block reaches nothing.
func (e *Egress) ReachesSSH(h SSHHost) bool {
	switch {
	case e == nil:
		return false
	case e.Mode == EgressObserve:
		return true
	}
	if a, err := netip.ParseAddr(h.Host); err == nil {
		return slices.ContainsFunc(e.CIDRs, func(p netip.Prefix) bool { return p.Contains(a.Unmap()) })
	}
	return e.Allows(h.Host, h.Port)
}

// ReachHint says what lets ssh reach h: an allowlist entry for a name, a
// CIDR for an address.
func ReachHint(h SSHHost) string {
	if _, err := netip.ParseAddr(h.Host); err == nil {
		return "add a CIDR holding " + h.Host + " to egress.allow_cidrs"
	}
	return fmt.Sprintf("add %s:%d to egress.allow", h.Host, h.Port)
}

// PublicKey decodes the pinned key (checked when the policy loaded).
func (k KnownHost) PublicKey() (ssh.PublicKey, error) {
	blob, err := base64.StdEncoding.DecodeString(k.Key)
	if err != nil {
		return nil, fmt.Errorf("pinned key of %s: %w", k.Hosts, err)
	}
	return ssh.ParsePublicKey(blob)
}

// SSHKeyPins are the pinned host keys of k's hosts, without repeats: the
// host keys of the sessions the agent may sign for with k.
func (r *Rule) SSHKeyPins(k SSHKey) []KnownHost {
	var out []KnownHost
	for _, h := range k.Hosts {
		for _, p := range r.Egress.PinsFor(h) {
			if !slices.ContainsFunc(out, func(o KnownHost) bool { return o.KeyType == p.KeyType && o.Key == p.Key }) {
				out = append(out, p)
			}
		}
	}
	return out
}
