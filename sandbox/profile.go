package sandbox

import (
	"fmt"
	"os"
	"path/filepath"
)

// Network is what a sandboxed command may reach.
type Network string

// Network modes.
const (
	// NetworkDeny: a private network namespace with nothing in it.
	NetworkDeny Network = "deny"
	// NetworkLoopback: a private network namespace with only its own lo.
	NetworkLoopback Network = "loopback"
	// NetworkProxied: a private network namespace whose only way out is
	// the egress proxy's unix socket, bound in at ProxySocketPath and
	// exposed to the command as an HTTP(S) proxy on its own loopback. On
	// macOS, which has no network namespace, the only way out is the
	// proxy's TCP port on the host's loopback (Profile.ProxyAddr).
	NetworkProxied Network = "proxied"
	// NetworkOpen: the host's network (explicit opt-in).
	NetworkOpen Network = "open"
)

// ParseNetwork validates a network mode name.
func ParseNetwork(s string) (Network, error) {
	switch n := Network(s); n {
	case NetworkDeny, NetworkLoopback, NetworkProxied, NetworkOpen:
		return n, nil
	case "":
		return NetworkDeny, nil
	}
	return "", fmt.Errorf("unknown network mode %q (want deny, loopback, proxied or open)", s)
}

// ProxySocketPath is where the egress proxy's socket appears inside the
// sandbox in proxied mode.
const ProxySocketPath = "/run/coily/proxy.sock"

// KnownHostsPath is where the rule's pinned ssh host keys (an OpenSSH
// known_hosts file) appear, read-only, inside the sandbox in proxied mode;
// the bridge points ssh at this file alone.
const KnownHostsPath = "/run/coily/known_hosts"

// SSHAgentPath is where the exec's ssh agent socket (Profile.SSHAgent)
// appears inside the sandbox in proxied mode; the server points
// SSH_AUTH_SOCK at it.
const SSHAgentPath = "/run/coily/agent.sock"

// Profile is what a sandboxed command may see and do. Paths are absolute
// host paths; they appear at the same place inside the sandbox.
type Profile struct {
	// Env is the complete environment of the command.
	Env []string
	// Dir is the command's working directory.
	Dir string
	// Home is the command's private, writable home directory (HOME and
	// TMPDIR; the workspace too when the rule's workspace is temporary).
	// bubblewrap gives a fresh, sized tmpfs at this path; other backends
	// use the host directory.
	Home string
	// ReadPaths are visible read-only; WritePaths read-write.
	ReadPaths  []string
	WritePaths []string
	// ProtectPaths stay read-only even inside a WritePath, besides the
	// protected classes every backend applies to writable roots (git
	// control entries anywhere, ProtectedNames at work tree roots).
	ProtectPaths []string
	// Writable names protected entries the command may write anyway (see
	// WritableNames): a rule's `writable:`.
	Writable []string
	// ScanBudget bounds the scans of the writable roots before and after
	// the command (zero fields: the defaults).
	ScanBudget ScanBudget
	// DenyPaths are hidden even inside a Read- or WritePath (secrets, the
	// server's own state).
	DenyPaths []string
	// Files are single host files made visible read-only (resolv.conf and
	// localtime, resolved to their real files).
	Files   map[string]string // sandbox path → host file
	Network Network
	// ProxySocket is the host path of the egress proxy's unix socket
	// (proxied mode, backends with a network namespace: bubblewrap).
	ProxySocket string
	// ProxyAddr is the host:port of the egress proxy on loopback, for
	// backends without a network namespace (sandbox-exec): exactly
	// "127.0.0.1:PORT" or "[::1]:PORT" (see ParseProxyAddr). The command
	// may connect to that port and nowhere else, and its HTTP_PROXY and
	// kin point there.
	ProxyAddr string
	// KnownHosts is the host path of a known_hosts file (the rule's
	// pinned ssh host keys), bound read-only at KnownHostsPath; git over
	// ssh then trusts these keys and no others (proxied mode only).
	KnownHosts string
	// SSHAgent is the host path of the exec's ssh agent socket (package
	// sshagent), bound at SSHAgentPath (proxied mode, bwrap only).
	SSHAgent string
	// UnixSockets are host unix sockets the command may connect to; each
	// is bound in at its own path. Without any, creating unix sockets is
	// refused by the seccomp filter.
	UnixSockets []string
	// Exec, when set, is the program to run, already opened (and its
	// digest checked) by the caller; it is run from this open file, at
	// ExecPath (its real path on the host), whatever the path now holds.
	Exec     *os.File
	ExecPath string
	// ExecName is the program's path as the policy names it (a rule's
	// binary as written, e.g. /bin/sh for /usr/bin/dash). Without
	// bubblewrap's --argv0, a command asked for by bare name runs by this
	// path when it names the bound program inside the sandbox as on the
	// host (see sameInside), so that its argv[0] still ends in the name it
	// was asked for by.
	ExecName string
	// Limits bound the command (zero fields: DefaultLimits).
	Limits Limits
	// CAFile, when set, is a CA bundle already opened by the caller, made
	// visible read-only at CAPath (bwrap only: other backends refuse it).
	CAFile *os.File
	// User is the host user the command runs as when the caller runs as
	// root (bwrap: zero means DefaultUser; uid 0 is refused). An
	// unprivileged caller's commands run as the caller, and User must be
	// zero. What the sandbox is given by descriptor (writable roots, the
	// proxy socket, the known hosts file, the bridge) must be open to this
	// user: a writable root writable, the socket writable, files readable.
	User User
	// Dynamic, when set (bwrap, a root caller), is the uid of this
	// command alone (UIDPool) it runs as, with User's group: its writable
	// roots are bound through idmapped mounts attached in MountDir (a
	// private directory of the caller's, searchable by Dynamic), so that
	// User's files show as Dynamic's and what it writes is stored as User's.
	// What the sandbox is given by descriptor but the writable roots must
	// then be open to Dynamic instead of User.
	Dynamic *Dynamic

	// unknownBinds are the places of binds DefaultProfile had no field
	// for (Validate refuses them).
	unknownBinds []string
}

// Dynamic is a command's own uid and where its idmapped mounts go.
type Dynamic struct {
	Pool     *UIDPool
	User     User
	MountDir string
}

// Validate checks that every path is absolute and clean and that the
// network mode is known.
func (p *Profile) Validate() error {
	if err := p.checkBinds(); err != nil {
		return err
	}
	if _, err := ParseNetwork(string(p.Network)); err != nil {
		return err
	}
	if p.Network == NetworkProxied && p.ProxySocket == "" && p.ProxyAddr == "" {
		return fmt.Errorf("proxied network needs a proxy socket or a proxy address")
	}
	if p.ProxyAddr != "" {
		if _, err := ParseProxyAddr(p.ProxyAddr); err != nil {
			return err
		}
	}
	if p.KnownHosts != "" && p.Network != NetworkProxied {
		return fmt.Errorf("ssh known hosts need the proxied network, got %q", p.Network)
	}
	if p.SSHAgent != "" && p.Network != NetworkProxied {
		return fmt.Errorf("an ssh agent needs the proxied network, got %q", p.Network)
	}
	if (p.Exec == nil) != (p.ExecPath == "") {
		return fmt.Errorf("exec file and exec path go together")
	}
	if err := CheckWritable(p.Writable); err != nil {
		return err
	}
	if err := p.Limits.Check(); err != nil {
		return err
	}
	check := func(what string, paths ...string) error {
		for _, path := range paths {
			if !filepath.IsAbs(path) || filepath.Clean(path) != path {
				return fmt.Errorf("%s path %q must be absolute and clean", what, path)
			}
		}
		return nil
	}
	for _, lp := range p.allPaths() {
		if err := check(lp.what, lp.path); err != nil {
			return err
		}
	}
	return nil
}

// labelledPath is one path of a profile and what it is for.
type labelledPath struct{ what, path string }

// allPaths lists every path the profile names (the proxy socket and the
// known hosts file only when set), for the checks each backend makes.
func (p *Profile) allPaths() []labelledPath {
	var out []labelledPath
	add := func(what string, paths ...string) {
		for _, path := range paths {
			out = append(out, labelledPath{what, path})
		}
	}
	add("read", p.ReadPaths...)
	add("write", p.WritePaths...)
	add("protect", p.ProtectPaths...)
	add("deny", p.DenyPaths...)
	add("socket", p.UnixSockets...)
	add("dir", p.Dir)
	add("home", p.Home)
	if p.ExecPath != "" {
		add("exec", p.ExecPath)
	}
	if p.ProxySocket != "" {
		add("proxy socket", p.ProxySocket)
	}
	if p.KnownHosts != "" {
		add("known hosts", p.KnownHosts)
	}
	if p.SSHAgent != "" {
		add("ssh agent", p.SSHAgent)
	}
	for dst, src := range p.Files {
		add("file", dst, src)
	}
	return out
}
