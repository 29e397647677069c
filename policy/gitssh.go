package policy

import (
	"slices"
	"strings"

	"coily.dev/coily/keystore/credref"
)

// maxGitKnownHosts bounds one ssh remote's pinned host keys.
const maxGitKnownHosts = 16

// gitSSH reads an ssh remote's ssh_key and known_hosts, and refuses them
// on an https remote (and an https remote's credential and ca_file on an
// ssh one). An ssh remote without a key or a pinned host key is refused:
// no pin, no connection.
func (b *builder) gitSSH(r *GitRemote, f *gitRemoteFile, at func(...any) []any) {
	if r.SSH == nil {
		switch {
		case f.SSHKey != "":
			b.failAt(b.at(at("ssh_key")...), "git remote %q: ssh_key is for an ssh remote (ssh://USER@HOST/PATH)", r.Name)
		case f.KnownHosts != nil:
			b.failAt(b.at(at("known_hosts")...), "git remote %q: known_hosts is for an ssh remote (ssh://USER@HOST/PATH)", r.Name)
		}
		return
	}
	switch {
	case f.Credential != "":
		b.failAt(b.at(at("credential")...), "git remote %q: credential is for an https remote; an ssh remote authenticates with ssh_key", r.Name)
	case f.CAFile != "":
		b.failAt(b.at(at("ca_file")...), "git remote %q: ca_file is for an https remote; an ssh remote trusts its known_hosts", r.Name)
	}
	switch {
	case f.SSHKey == "":
		b.failAt(b.at(at()...), "git remote %q: an ssh remote needs ssh_key: a reference to its private key (vault:secret/coily/deploy#private_key)", r.Name)
	case strings.Contains(f.SSHKey, "PRIVATE KEY") || strings.ContainsAny(f.SSHKey, "\n\r"):
		// Never echo what may be a private key pasted in place of its
		// reference: errors reach logs and terminals.
		b.failAt(b.at(at("ssh_key")...), "git remote %q: ssh_key: this is a private key, not a reference to one: store it in Vault or the keychain and name it here", r.Name)
	default:
		ref, err := credref.Parse(f.SSHKey)
		if err != nil {
			b.failAt(b.at(at("ssh_key")...), "git remote %q: ssh_key: %v", r.Name, err)
		}
		r.SSH.Key = ref
	}
	b.gitKnownHosts(r, f.KnownHosts, at)
}

// gitKnownHosts reads an ssh remote's known_hosts: 1 to
// maxGitKnownHosts lines, each naming the remote's host.
func (b *builder) gitKnownHosts(r *GitRemote, lines []string, at func(...any) []any) {
	host := r.SSHHost()
	if len(lines) == 0 || len(lines) > maxGitKnownHosts {
		b.failAt(b.at(at()...), "git remote %q: an ssh remote needs known_hosts: 1 to %d lines pinning the host keys of %s (ssh-keyscan, checked out of band)",
			r.Name, maxGitKnownHosts, host)
		return
	}
	for j, line := range lines {
		k, err := ParseKnownHost(line)
		switch {
		case err != nil:
			b.failAt(b.at(at("known_hosts", j)...), "git remote %q: known_hosts: %v", r.Name, err)
		case !slices.Contains(k.Hosts, host):
			b.failAt(b.at(at("known_hosts", j)...), "git remote %q: known_hosts line %d does not name the remote's host %s", r.Name, j+1, host)
		case slices.ContainsFunc(r.SSH.KnownHosts, func(o KnownHost) bool { return o.Key == k.Key }):
			b.failAt(b.at(at("known_hosts", j)...), "git remote %q: known_hosts line %d repeats a key", r.Name, j+1)
		default:
			r.SSH.KnownHosts = append(r.SSH.KnownHosts, k)
		}
	}
}
