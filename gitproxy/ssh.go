package gitproxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"

	"golang.org/x/crypto/ssh"

	"coily.dev/coily/policy"
	"coily.dev/coily/refusal"
	"coily.dev/coily/sshagent"
)

// sshUpstream is what git needs to reach an ssh remote besides its
// configuration: the private key, held in memory only, and the address
// resolved and classified once.
type sshUpstream struct {
	remote *policy.GitRemote
	addr   netip.Addr
	signer ssh.Signer
	ssh    string // the ssh executable
}

// sshUpstream fetches the remote's key and parses it; it never reaches
// a file.
func (p *Proxy) sshUpstream(ctx context.Context, rem *policy.GitRemote, addr netip.Addr) (*sshUpstream, error) {
	bin, err := exec.LookPath("ssh")
	if err != nil {
		return nil, refusal.Wrap(refusal.Internal, err, "git remote %q: ssh is not installed on the server", rem.Name)
	}
	value, err := p.credential(ctx, rem.SSH.Key)
	if err != nil {
		return nil, refusal.Wrap(refusal.CredentialUnavailable, err, "git remote %q: its ssh_key is unavailable", rem.Name)
	}
	signer, err := sshagent.ParsePrivateKey(value)
	if err != nil {
		err = fmt.Errorf("ssh_key %s: not usable as an ssh private key: %v", rem.SSH.Key, err)
		return nil, refusal.Wrap(refusal.CredentialUnavailable, err, "git remote %q: %v", rem.Name, err)
	}
	return &sshUpstream{remote: rem, addr: addr, signer: signer, ssh: bin}, nil
}

// sshConfig is the git configuration of an ssh upstream: ssh and nothing
// else, as OpenSSH.
func sshConfig() [][2]string {
	return [][2]string{
		{"protocol.allow", "never"},
		{"protocol.ssh.allow", "always"},
		{"ssh.variant", "ssh"},
		{"credential.helper", ""},
	}
}

// maxSignatures bounds what one session's agent signs: a git run logs in
// once.
const maxSignatures = 4

// session starts, for one git run, an ssh agent holding the key on a
// socket in a fresh 0700 directory, beside the remote's pinned host keys
// as a known_hosts file and the key's public half; it returns the
// environment that points git's ssh at them. end stops the agent,
// removes the directory and returns what the agent did (it logs its
// refusals itself).
func (s *sshUpstream) session(p *Proxy) (env []string, end func() sshagent.Report, err error) {
	dir, err := os.MkdirTemp("", "coily-git-ssh-")
	if err != nil {
		return nil, nil, refusal.Wrap(refusal.Internal, err, "git remote %q: ssh agent directory", s.remote.Name)
	}
	fail := func(err error) ([]string, func() sshagent.Report, error) {
		os.RemoveAll(dir)
		return nil, nil, refusal.Wrap(refusal.Internal, err, "git remote %q: ssh agent", s.remote.Name)
	}
	if !sshPath.MatchString(dir) {
		// ssh reads its options' values with quotes and spaces of its
		// own: a path is given only where it needs neither.
		return fail(fmt.Errorf("directory %q: ssh takes a path of letters, digits and /._- only (set TMPDIR)", dir))
	}
	alias := s.remote.SSHHost().String()
	known, hostKeys, err := s.pins(alias)
	if err != nil {
		return fail(err)
	}
	knownFile, pubFile, sock := filepath.Join(dir, "known_hosts"), filepath.Join(dir, "key.pub"), filepath.Join(dir, "agent.sock")
	if err := os.WriteFile(knownFile, known, 0o600); err != nil {
		return fail(err)
	}
	if err := os.WriteFile(pubFile, ssh.MarshalAuthorizedKey(s.signer.PublicKey()), 0o600); err != nil {
		return fail(err)
	}
	pinned := map[string]string{}
	for _, k := range s.remote.SSH.KnownHosts {
		pinned[k.Fingerprint] = alias
	}
	ag, err := sshagent.New(sshagent.Config{Rule: "git:" + s.remote.Name, MaxSignatures: maxSignatures, PinnedFor: pinned, Logger: p.log,
		Keys: []sshagent.Key{{Name: s.remote.SSH.Key.String(), Signer: s.signer, HostKeys: hostKeys, Hosts: alias}}})
	if err != nil {
		return fail(err)
	}
	l, err := net.Listen("unix", sock)
	if err != nil {
		return fail(err)
	}
	ag.Start(l)
	end = func() sshagent.Report {
		ag.Close()
		os.RemoveAll(dir)
		return ag.Report()
	}
	return []string{"GIT_SSH_COMMAND=" + s.command(knownFile, pubFile, sock)}, end, nil
}

// pins are the remote's pinned host keys as a known_hosts file naming
// them by alias only, and decoded, for the agent.
func (s *sshUpstream) pins(alias string) ([]byte, []ssh.PublicKey, error) {
	var known strings.Builder
	var keys []ssh.PublicKey
	for _, k := range s.remote.SSH.KnownHosts {
		pub, err := k.PublicKey()
		if err != nil {
			return nil, nil, err
		}
		keys = append(keys, pub)
		fmt.Fprintf(&known, "%s %s %s\n", alias, k.KeyType, k.Key)
	}
	return []byte(known.String()), keys, nil
}

// command is git's ssh: the system's OpenSSH with no configuration file,
// the remote's pinned host keys only (under the remote's name, for the
// address resolved and classified once, so DNS is not asked again), the
// key through the agent only, no prompt, no proxy, no forwarding, no
// connection sharing. git appends the port, user@host and the command.
func (s *sshUpstream) command(knownFile, pubFile, sock string) string {
	opts := []string{
		"StrictHostKeyChecking=yes", "UserKnownHostsFile=" + knownFile, "GlobalKnownHostsFile=/dev/null",
		"HostKeyAlias=" + s.remote.SSHHost().String(), "HostKeyAlgorithms=" + hostKeyAlgorithms(s.remote.SSH.KnownHosts),
		"CheckHostIP=no", "UpdateHostKeys=no", "VerifyHostKeyDNS=no", "CanonicalizeHostname=no",
		"HostName=" + s.addr.String(),
		"IdentitiesOnly=yes", "IdentityFile=" + pubFile, "IdentityAgent=" + sock, "CertificateFile=none",
		"PreferredAuthentications=publickey", "BatchMode=yes", "AddKeysToAgent=no",
		"ProxyCommand=none", "ProxyJump=none", "ForwardAgent=no", "ForwardX11=no", "ClearAllForwardings=yes",
		"PermitLocalCommand=no", "ControlMaster=no", "ControlPath=none", "ConnectTimeout=30",
	}
	var b strings.Builder
	b.WriteString(shellQuote(s.ssh) + " -F /dev/null")
	for _, o := range opts {
		b.WriteString(" -o " + shellQuote(o))
	}
	return b.String()
}

// hostKeyAlgorithms are the algorithms of the pinned keys: the upstream
// must show one of them, so a host key that is not pinned is named in
// ssh's refusal.
func hostKeyAlgorithms(pins []policy.KnownHost) string {
	var algs []string
	for _, k := range pins {
		a := k.KeyType
		if a == ssh.KeyAlgoRSA {
			a = ssh.KeyAlgoRSASHA512 + "," + ssh.KeyAlgoRSASHA256
		}
		if !strings.Contains(","+strings.Join(algs, ",")+",", ","+a+",") {
			algs = append(algs, a)
		}
	}
	return strings.Join(algs, ",")
}

// sshPath is a path ssh's options take as one plain value.
var sshPath = regexp.MustCompile(`^/[A-Za-z0-9/._-]{1,80}$`)

// shellQuote quotes s for the shell git runs GIT_SSH_COMMAND with.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// offeredKey finds, in what ssh wrote, the fingerprint of a host key that
// does not match the pins.
var offeredKey = regexp.MustCompile(`key sent by the remote host is\s+(SHA256:[A-Za-z0-9+/]{43})(?:[^A-Za-z0-9+/=]|$)`)

// sshRefusal names what ssh refused: a host key the remote does not pin,
// or a host that shows no key of a pinned type; nil for anything else.
// Only for a run whose agent signed nothing: past the host key check,
// what ssh's standard error holds is upstream's to write.
func sshRefusal(rem *policy.GitRemote, err error) error {
	var ge *gitError
	if rem.SSH == nil || !errors.As(err, &ge) || !strings.Contains(ge.stderr, "Host key verification failed") &&
		!strings.Contains(ge.stderr, "no matching host key type") {
		return nil
	}
	pinned := make([]string, len(rem.SSH.KnownHosts))
	for i, k := range rem.SSH.KnownHosts {
		pinned[i] = k.Fingerprint
	}
	if m := offeredKey.FindStringSubmatch(ge.stderr); m != nil {
		return refusal.Wrap(refusal.PolicyDeny, err, "upstream %s showed host key %s, which git remote %q does not pin (known_hosts: %s)",
			rem.SSHHost(), m[1], rem.Name, strings.Join(pinned, ", "))
	}
	return refusal.Wrap(refusal.PolicyDeny, err, "upstream %s showed no host key git remote %q pins (known_hosts: %s)",
		rem.SSHHost(), rem.Name, strings.Join(pinned, ", "))
}
