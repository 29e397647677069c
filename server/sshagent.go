package server

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/crypto/ssh"

	"coily.dev/coily/audit"
	"coily.dev/coily/cmdtext"
	"coily.dev/coily/policy"
	"coily.dev/coily/refusal"
	"coily.dev/coily/sshagent"
)

// sshKeyVar is the name the server fetches the private key of a rule's
// ssh key i under: never an environment variable of the child (policy
// reserves COILY_SSH_*), only a label of its redaction.
func sshKeyVar(i int) string { return "COILY_SSH_KEY_" + strconv.Itoa(i) }

// takeSSHKeys parses the fetched private keys of the rule's ssh_keys and
// takes them out of vals (which become the child's environment): they
// reach the exec's ssh agent only. A value that is no usable private key
// refuses the exec with credential-unavailable, naming the reference.
func takeSSHKeys(r *policy.Rule, vals map[string]string) ([]ssh.Signer, error) {
	var out []ssh.Signer
	for i, k := range r.SSHKeys {
		s, err := sshagent.ParsePrivateKey(vals[sshKeyVar(i)])
		delete(vals, sshKeyVar(i))
		if err != nil {
			err = fmt.Errorf("credential %s: not usable as an ssh private key: %v", k.Key, err)
			return nil, refusal.Wrap(refusal.CredentialUnavailable, err, "%v", err)
		}
		out = append(out, s)
	}
	return out, nil
}

// sshAgentRun is one exec's ssh agent (a rule with ssh_keys): it listens
// on a unix socket in the exec's egress directory, which the sandbox
// binds at sandbox.SSHAgentPath, and ends with the exec.
type sshAgentRun struct {
	agent  *sshagent.Agent
	Socket string

	once   sync.Once
	report sshagent.Report
}

// startSSHAgent starts the agent of a rule with ssh_keys, holding the
// keys fetched for x, each for the host keys the rule pins for its hosts.
// It needs the exec's egress run (ssh_keys needs network proxied).
func (s *Server) startSSHAgent(x *execution, eg *egressRun) (*sshAgentRun, error) {
	if len(x.rule.SSHKeys) == 0 {
		return nil, nil
	}
	if eg == nil || eg.Socket == "" || len(x.sshSigners) != len(x.rule.SSHKeys) {
		return nil, refusal.New(refusal.SandboxUnavailable, "rule %q: its ssh agent needs the bwrap sandbox's egress proxy", x.rule.Name)
	}
	keys, err := agentKeys(x.rule, x.sshSigners)
	if err != nil {
		return nil, refusal.Wrap(refusal.Internal, err, "rule %q: ssh agent", x.rule.Name)
	}
	ag, err := sshagent.New(sshagent.Config{Rule: x.rule.Name, Keys: keys, PinnedFor: pinnedFor(x.rule),
		Logger: s.log.With("request_id", x.id), Secrets: x.scrub})
	if err != nil {
		return nil, refusal.Wrap(refusal.Internal, err, "rule %q: ssh agent", x.rule.Name)
	}
	sock := filepath.Join(eg.dir, "agent.sock")
	l, err := listenUnix(sock)
	if err != nil {
		return nil, refusal.Wrap(refusal.SandboxUnavailable, err, "rule %q: ssh agent listener", x.rule.Name)
	}
	if err := s.giveToSandbox(x, sock); err != nil { // a root server's sandbox user connects through its descriptor
		l.Close()
		return nil, refusal.Wrap(refusal.SandboxUnavailable, err, "rule %q: ssh agent listener", x.rule.Name)
	}
	ag.Start(l)
	return &sshAgentRun{agent: ag, Socket: sock}, nil
}

// agentKeys pairs each of the rule's ssh keys with its signer and the
// host keys pinned for its hosts.
func agentKeys(r *policy.Rule, signers []ssh.Signer) ([]sshagent.Key, error) {
	keys := make([]sshagent.Key, 0, len(r.SSHKeys))
	for i, k := range r.SSHKeys {
		var hostKeys []ssh.PublicKey
		for _, pin := range r.SSHKeyPins(k) {
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

// socket is the agent's socket, "" without an agent.
func (r *sshAgentRun) socket() string {
	if r == nil {
		return ""
	}
	return r.Socket
}

// stop closes the agent and every connection to it, and returns what it
// did, for the exec's answer and audit record.
func (r *sshAgentRun) stop() sshagent.Report {
	if r == nil {
		return sshagent.Report{}
	}
	r.once.Do(func() {
		r.agent.Close()
		r.report = r.agent.Report()
	})
	return r.report
}

// sshAgentDetails are the audit record's details of the exec's agent:
// how many signatures it made, and its refusals (a list).
func sshAgentDetails(rep sshagent.Report, rec *audit.Record) {
	setDetail(rec, "ssh_agent_signed", strconv.Itoa(rep.Signed))
	setList(rec, "ssh_agent_refused", cmdtext.Strings(rep.Refused))
	if rep.More > 0 {
		setDetail(rec, "ssh_agent_refused_more", strconv.Itoa(rep.More))
	}
}

// agentSentences are the agent's refusals for the exec's answer, each
// naming the rule.
func agentSentences(rule string, rep sshagent.Report) []string {
	var out []string
	for _, s := range rep.Refused {
		out = append(out, fmt.Sprintf("ssh agent of rule %q %s", rule, s.String()))
	}
	return out
}

// sshKeyNames lists "reference=hosts" pairs for the audit log.
func sshKeyNames(keys []policy.SSHKey) []string {
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, k.Key.String()+"="+k.HostList())
	}
	return parts
}
