package sandbox

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// ProfileInput is what the default profile is built from.
type ProfileInput struct {
	// Workspace is the command's writable directory; Home its private,
	// writable home (often the same temporary directory); Dir the working
	// directory inside Workspace.
	Workspace, Home, Dir string
	Env                  []string
	Network              Network
	// Binds are what the exec's attachments make visible inside the
	// sandbox (the egress proxy, the known hosts file, the ssh agent, the
	// CA bundle), each at the place reserved for it.
	Binds       []Bind
	UnixSockets []string
	// StateDir and Socket are the server's own; always denied.
	StateDir, Socket string
	// OwnFiles are further files of the server's own (its policy, its
	// credentials file, Vault token files): always denied, so that no
	// command rewrites the policy it runs under or reads a secret at rest.
	OwnFiles []string
	// UserHomes are homes whose secrets are denied wherever they would be
	// visible (the server's user's home, /root).
	UserHomes []string
	// Writable opts protected entries in (a rule's `writable:`).
	Writable []string
	// ScanBudget bounds the workspace's scans (zero: the defaults).
	ScanBudget ScanBudget
	// Exec and ExecPath: the program, opened by the caller (Profile.Exec).
	Exec     *os.File
	ExecPath string
	// ExecName is the program's path as the policy names it
	// (Profile.ExecName).
	ExecName string
	// Limits bound the command.
	Limits Limits
	// User is who a root caller's command runs as (Profile.User).
	User User
	// Dynamic is the command's own uid, if it has one (Profile.Dynamic).
	Dynamic *Dynamic
}

// SecretPaths are denied under every home in ProfileInput.UserHomes.
var SecretPaths = []string{
	".ssh", ".aws", ".config/gh", ".gnupg", ".netrc", ".docker/config.json", ".kube",
	".vault-token", ".config/gcloud", ".azure", ".local/share/keyrings", "Library/Keychains",
	".git-credentials", ".config/git/credentials", ".password-store",
}

// SystemDenyPaths are always denied: host secrets the system directories
// would otherwise show to a sandbox whose user may read them (the
// server's user may be in their group). A root caller's sandbox runs as
// the unprivileged sandbox user (Profile.User): root-only files no list
// names stay unreadable to it.
var SystemDenyPaths = []string{
	"/etc/ssh", "/etc/shadow", "/etc/gshadow", "/etc/shadow-", "/etc/gshadow-",
	"/etc/sudoers", "/etc/sudoers.d", "/etc/security/opasswd", "/etc/coily",
	"/etc/vault.d", "/var/lib/coily",
}

// DefaultProfile builds the default profile (docs/sandbox.md): system directories
// read-only (SystemReadPaths), resolv.conf and localtime resolved to their
// real files, private /tmp and home, the workspace writable with its
// protected classes read-only (every backend applies them: git control
// entries anywhere, ProtectedNames at work tree roots), the secret and
// system deny sets and the server's own state hidden.
func DefaultProfile(in ProfileInput) Profile {
	p := Profile{
		Env: in.Env, Dir: in.Dir, Home: in.Home, Network: in.Network, UnixSockets: in.UnixSockets,
		Files:    resolvedFiles("/etc/resolv.conf", "/etc/localtime"),
		Writable: in.Writable, ScanBudget: in.ScanBudget, Exec: in.Exec, ExecPath: in.ExecPath, ExecName: in.ExecName, Limits: in.Limits,
		User: in.User, Dynamic: in.Dynamic,
	}
	for _, b := range in.Binds {
		p.bind(b)
	}
	if in.Workspace != "" {
		p.WritePaths = append(p.WritePaths, in.Workspace)
	}
	for _, home := range in.UserHomes {
		for _, s := range SecretPaths {
			p.DenyPaths = append(p.DenyPaths, filepath.Join(home, s))
		}
	}
	p.DenyPaths = append(p.DenyPaths, SystemDenyPaths...)
	for _, own := range append([]string{in.StateDir, in.Socket}, in.OwnFiles...) {
		if own != "" {
			p.DenyPaths = append(p.DenyPaths, filepath.Clean(own))
		}
	}
	slices.Sort(p.DenyPaths)
	p.DenyPaths = slices.Compact(p.DenyPaths)
	return p
}

// resolvedFiles maps each file that is a symbolic link to a target outside
// the system directories (e.g. /etc/resolv.conf → /run/systemd/…) to that
// target, bound at its own path so the link resolves inside the sandbox;
// /run itself is never bound.
func resolvedFiles(files ...string) map[string]string {
	out := map[string]string{}
	for _, f := range files {
		real, err := filepath.EvalSymlinks(f)
		if err != nil || real == f {
			continue
		}
		if fi, err := os.Stat(real); err != nil || !fi.Mode().IsRegular() {
			continue
		}
		inSystem := false
		for _, dir := range SystemReadPaths {
			if real == dir || strings.HasPrefix(real, dir+"/") {
				inSystem = true
			}
		}
		if !inSystem {
			out[real] = real
		}
	}
	return out
}
