// Package sshkeys is the attachment of a rule's ssh_keys: the private
// keys, fetched with the rule's credentials and kept out of the child's
// environment, are held by the exec's own ssh agent (package sshagent),
// each for the host keys the rule pins for its hosts. The agent listens
// on a unix socket in a private scratch directory, bound at
// sandbox.SSHAgentPath, where SSH_AUTH_SOCK points; it ends with the
// command, and what it did goes into the result record and the answer.
// The package reads the rule's `ssh_keys` section too (section.go).
package sshkeys

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/crypto/ssh"

	"coily.dev/coily/attach"
	"coily.dev/coily/audit"
	"coily.dev/coily/cmdtext"
	"coily.dev/coily/keystore"
	"coily.dev/coily/policy"
	"coily.dev/coily/refusal"
	"coily.dev/coily/sandbox"
	"coily.dev/coily/scrub"
	"coily.dev/coily/sshagent"
)

// Keys are the ssh keys of one rule, for one execution.
type Keys struct {
	rule *policy.Rule
	keys []SSHKey
	// signers hold the private keys of the rule's ssh_keys, in order: for
	// the exec's agent only.
	signers []ssh.Signer
	agent   *sshagent.Agent
	dir     string
	closed  bool
}

// New is the attachment of r's ssh_keys; nil when it has none.
func New(r *policy.Rule) *Keys {
	keys := Of(r)
	if len(keys) == 0 {
		return nil
	}
	return &Keys{rule: r, keys: keys}
}

var _ attach.Credentialed = (*Keys)(nil)

// KeyVar is the name the private key of a rule's ssh key i is fetched
// under: never an environment variable of the child (policy reserves
// COILY_SSH_*), only a label of its redaction.
func KeyVar(i int) string { return "COILY_SSH_KEY_" + strconv.Itoa(i) }

// Refs are the rule's keys, each under KeyVar.
func (k *Keys) Refs() map[string]keystore.Ref {
	refs := map[string]keystore.Ref{}
	for i, key := range k.keys {
		refs[KeyVar(i)] = key.Key
	}
	return refs
}

// Take parses the fetched private keys and takes them out of vals: they
// reach the exec's ssh agent only. A value that is no usable private key
// refuses the exec with credential-unavailable, naming the reference;
// what it took is returned all the same, to be redacted.
func (k *Keys) Take(_ context.Context, vals map[string]string) ([]scrub.Secret, error) {
	var taken []scrub.Secret
	values := make([]string, len(k.keys))
	for i := range k.keys {
		if v, ok := vals[KeyVar(i)]; ok {
			taken = append(taken, scrub.Secret{Name: KeyVar(i), Value: v})
			values[i] = v
			delete(vals, KeyVar(i))
		}
	}
	for i, key := range k.keys {
		s, err := sshagent.ParsePrivateKey(values[i])
		if err != nil {
			err = fmt.Errorf("credential %s: not usable as an ssh private key: %v", key.Key, err)
			return taken, refusal.Wrap(refusal.CredentialUnavailable, err, "%v", err)
		}
		k.signers = append(k.signers, s)
	}
	return taken, nil
}

// Prepare starts the agent, holding the keys taken, and points
// SSH_AUTH_SOCK at its socket. It needs the exec's egress proxy's socket
// (ssh_keys needs network proxied, and the bwrap sandbox).
func (k *Keys) Prepare(_ context.Context, run *attach.Run) error {
	name := k.rule.Name
	if run.Bound(sandbox.ProxySocketPath) == "" || len(k.signers) != len(k.keys) {
		return refusal.New(refusal.SandboxUnavailable, "rule %q: its ssh agent needs the bwrap sandbox's egress proxy", name)
	}
	keys, err := agentKeys(k.rule, k.signers)
	if err != nil {
		return refusal.Wrap(refusal.Internal, err, "rule %q: ssh agent", name)
	}
	ag, err := sshagent.New(sshagent.Config{Rule: name, Keys: keys, PinnedFor: pinnedFor(k.rule),
		Logger: run.Log.With("request_id", run.ID), Secrets: run.Secrets})
	if err != nil {
		return refusal.Wrap(refusal.Internal, err, "rule %q: ssh agent", name)
	}
	dir, err := run.PrivateDir()
	if err != nil {
		return refusal.Wrap(refusal.SandboxUnavailable, err, "rule %q: ssh agent listener", name)
	}
	k.dir = dir
	sock := filepath.Join(dir, "agent.sock")
	l, err := attach.ListenUnix(sock)
	if err != nil {
		return refusal.Wrap(refusal.SandboxUnavailable, err, "rule %q: ssh agent listener", name)
	}
	if err := run.Give(sock); err != nil { // a root server's sandbox user connects through its descriptor
		l.Close()
		return refusal.Wrap(refusal.SandboxUnavailable, err, "rule %q: ssh agent listener", name)
	}
	ag.Start(l)
	k.agent = ag
	run.Bind(sandbox.Bind{At: sandbox.SSHAgentPath, Path: sock})
	run.SetEnv("SSH_AUTH_SOCK", sandbox.SSHAgentPath)
	return nil
}

// Close closes the agent and every connection to it; what it did goes
// into the result record and the answer.
func (k *Keys) Close(_ context.Context, end *attach.End) {
	if k.closed {
		return
	}
	k.closed = true
	var rep sshagent.Report
	if k.agent != nil {
		k.agent.Close()
		rep = k.agent.Report()
	}
	if k.dir != "" {
		os.RemoveAll(k.dir)
	}
	if !end.Result {
		return
	}
	if end.Record != nil {
		details(rep, end.Record)
		for i, n := range rep.SignedBy {
			if n > 0 {
				end.Record.UseCredential(fmt.Sprintf("ssh agent key %s: %d signature(s)", k.keys[i].Key, n))
			}
		}
	}
	if end.Exit != nil {
		end.Exit.SshAgentRefused = sentences(k.rule.Name, rep)
	}
}

// Describe lists the rule's keys as "reference=hosts" pairs: never keys.
func (k *Keys) Describe(rec *audit.Record) {
	parts := make([]string, 0, len(k.keys))
	for _, key := range k.keys {
		parts = append(parts, key.Key.String()+"="+key.HostList())
	}
	rec.SetList("ssh_keys", parts)
}

// agentKeys pairs each of the rule's ssh keys with its signer and the
// host keys pinned for its hosts.
func agentKeys(r *policy.Rule, signers []ssh.Signer) ([]sshagent.Key, error) {
	keys := make([]sshagent.Key, 0, len(Of(r)))
	for i, k := range Of(r) {
		var hostKeys []ssh.PublicKey
		for _, pin := range Pins(r, k) {
			pub, err := pin.PublicKey()
			if err != nil {
				return nil, err
			}
			hostKeys = append(hostKeys, pub)
		}
		keys = append(keys, sshagent.Key{Name: k.Key.String(), Signer: signers[i], HostKeys: hostKeys, Hosts: k.HostList()})
	}
	return keys, nil
}

// pinnedFor names the hosts each of the rule's pinned host keys is pinned
// for, by fingerprint.
func pinnedFor(r *policy.Rule) map[string]string {
	out := map[string]string{}
	for _, k := range r.Egress.SSHKnownHosts {
		hosts := strings.SplitN(k.String(), " ", 2)[0]
		if prev, ok := out[k.Fingerprint]; ok {
			hosts = prev + "," + hosts
		}
		out[k.Fingerprint] = hosts
	}
	return out
}

// details are the result record's details of the agent: how many
// signatures it made, and its refusals (a list).
func details(rep sshagent.Report, rec *audit.Record) {
	rec.SetDetail("ssh_agent_signed", strconv.Itoa(rep.Signed))
	rec.SetList("ssh_agent_refused", cmdtext.Strings(rep.Refused))
	if rep.More > 0 {
		rec.SetDetail("ssh_agent_refused_more", strconv.Itoa(rep.More))
	}
}

// sentences are the agent's refusals for the exec's answer, each naming
// the rule.
func sentences(rule string, rep sshagent.Report) []string {
	var out []string
	for _, s := range rep.Refused {
		out = append(out, fmt.Sprintf("ssh agent of rule %q %s", rule, s.String()))
	}
	return out
}

// Holds says whether the keys taken hold the private key of pub.
func (k *Keys) Holds(pub ssh.PublicKey) bool {
	for _, s := range k.signers {
		if string(s.PublicKey().Marshal()) == string(pub.Marshal()) {
			return true
		}
	}
	return false
}
