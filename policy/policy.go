// Package policy owns coily's authorization policy: which principals hold
// which roles, which RPC permissions those roles carry, and which command
// rules they may run.
//
// Invariants:
//   - default deny: a principal with no matching grant has no permission, and
//     an argv that matches no rule the principal may use is denied;
//   - every decision carries a reason and, when one matched, the rule;
//   - a Policy is immutable once loaded, so it can be swapped atomically;
//   - binaries are absolute paths; the sandbox backend defaults to the
//     platform sandbox, and "native" (no sandbox) must be named explicitly.
package policy

import (
	"path"
	"slices"
	"strings"
	"time"

	"coily.dev/coily/descriptor"
	"coily.dev/coily/keystore/credref"
	"coily.dev/coily/sandbox"
)

// Permission names one capability checked by the server's per-RPC table.
type Permission string

// The permissions a role may carry.
const (
	PermExec      Permission = "exec"
	PermLockout   Permission = "lockout"
	PermUnlock    Permission = "unlock"
	PermPause     Permission = "pause"
	PermResume    Permission = "resume"
	PermStatus    Permission = "status"
	PermApprove   Permission = "approve"
	PermAuditRead Permission = "audit-read"
	// PermRelay lets a bridge relay request descriptors for the sandboxes
	// its role lists (Role.Sandboxes).
	PermRelay Permission = "relay"
	// PermKeys issues and rotates sandboxes' descriptor signing keys.
	PermKeys Permission = "keys"
	// PermMetrics reads the metrics, health and readiness endpoints on
	// the tailnet (the local metrics listener is for a local Prometheus
	// and asks no identity).
	PermMetrics Permission = "metrics"
)

// AllPermissions lists every known permission, in a stable order.
var AllPermissions = []Permission{
	PermExec, PermLockout, PermUnlock, PermPause, PermResume, PermStatus, PermApprove, PermAuditRead, PermRelay, PermKeys, PermMetrics,
}

// OperatorRole is the role every local operator holds. Whatever the policy
// says, it always carries OperatorBaseline, so that the host's operator can
// always stop and unlock the server.
const OperatorRole = "operator"

// OperatorBaseline is what the operator role carries even when the policy
// does not define it.
var OperatorBaseline = []Permission{PermLockout, PermUnlock, PermPause, PermResume, PermStatus}

// Sandbox backend names a rule may use.
const (
	SandboxNative      = "native"
	SandboxBwrap       = "bwrap"
	SandboxSandboxExec = "sandbox-exec"
)

// Network modes a rule may name (see package sandbox).
const (
	NetworkDeny     = "deny"
	NetworkLoopback = "loopback"
	NetworkProxied  = "proxied"
	NetworkOpen     = "open"
)

// Defaults applied to rules that do not set a value.
const (
	DefaultTimeout   = 60 * time.Second
	MaxTimeout       = 24 * time.Hour
	DefaultMaxOutput = 4 << 20
)

// Policy is a loaded, validated policy. It is never mutated after Load.
type Policy struct {
	// Path and SHA256 identify the file the policy came from.
	Path   string
	SHA256 string

	operatorUsers  []string
	operatorGroups []string
	roles          map[string]*Role
	grants         []Grant
	rules          []*Rule
	workspaces     map[string]string
	workspaceReal  map[string]string // workspaces resolved at load
	concurrency    int
	perPrincipal   int
	limits         sandbox.Limits // every rule's default resource limits
	notify         *Notify        // the notify block; nil: none
	git            *Git           // the git section; nil: none
	// gitConfigWritable: some rule may write .git/config, so a push that
	// names no refspec may force by configuration (configMayForce).
	gitConfigWritable bool
	// byName indexes rules, in file order, by command name (Rule.Command).
	byName map[string][]*Rule
	// byBinary indexes rules, in file order, by resolved binary and by the
	// binary as written.
	byBinary map[string][]*Rule
}

// Role is a named bundle of permissions and command rules.
type Role struct {
	Name        string
	Permissions []Permission
	// Commands are rule names (or "*" for every rule) holders may run.
	Commands []string
	// Sandboxes are the sandbox names (or "*") holders of the relay
	// permission may relay descriptors for.
	Sandboxes []string
}

// Grant gives roles to the principals its globs match.
type Grant struct {
	Principals []string
	Roles      []string
}

// Rule is one command rule. Deny rules use only Name, Binary, Args,
// Reason and Report; the rest describe how an allowed command runs.
type Rule struct {
	Name   string
	Effect Result
	// Binary is the path as written (the first of Candidates present on
	// this host, else the first); Resolved is it with symbolic links
	// resolved when the policy loaded ("" when Absent says why not).
	Binary     string
	Candidates []string
	Resolved   string
	Absent     error
	// SHA256 pins the binary's content (hex), checked at load and before
	// every run.
	SHA256 string
	Args   ArgSpec
	// Reason is shown to the caller when this deny rule refuses.
	Reason string
	// Report makes a deny rule allow but record that it would deny.
	Report bool
	// Env lists the environment variables a caller may pass, PassEnv's
	// included.
	Env []string
	// PassEnv lists the variables shims forward from the caller's own
	// environment (`pass_env`), each also in Env.
	PassEnv []string
	// Credentials maps an environment variable of the child to the
	// credential reference the server fetches into it (never echoed).
	Credentials map[string]credref.Ref
	// CAFile is the owner's PEM bundle the command trusts instead of the
	// system's (`ca_file:`); "" for none.
	CAFile string
	// Workspace is WorkspaceTemp or the name of a policy workspace.
	Workspace string
	Sandbox   string
	// Network is what the sandboxed command may reach: NetworkDeny (the
	// default), NetworkLoopback, NetworkProxied or NetworkOpen.
	Network string
	// Egress is what a proxied command may reach (nil: no egress block,
	// which leaves an enforced proxy nothing to allow).
	Egress *Egress
	// Timeout is the default and maximum run time.
	Timeout time.Duration
	// MaxOutput caps each of stdout and stderr, in bytes.
	MaxOutput int64
	// Confirm requires a human approval, which expires after
	// ConfirmTimeout.
	Confirm        bool
	ConfirmTimeout time.Duration
	// Rate limits calls per principal; nil means unlimited.
	Rate *RateLimit
	// Concurrency caps this rule's commands running at once; 0 means only
	// the server-wide cap applies.
	Concurrency int
	// PerPrincipal caps one principal's commands of this rule running at
	// once; 0 means only limits.per_principal applies.
	PerPrincipal int
	// Writable names protected entries of the workspace the command may
	// write (sandbox.WritableNames): ".git", ".git/config", ".vscode"…
	Writable []string
	// Limits bound the command (the policy's defaults, then the rule's);
	// a zero CPU means the rule's timeout.
	Limits sandbox.Limits
	// Line is where the rule starts in the policy file.
	Line int
	// sections are the registered sections the rule has, in the order
	// of their keys, with what each read (Section).
	sections []sectionValue
}

// RateLimit is a token bucket: PerMinute tokens a minute, at most Burst.
type RateLimit struct {
	PerMinute int
	Burst     int
}

// Subject is who asks: a principal, other names it answers to (a tailnet
// node's further tags), the roles its transport itself gave it (the local
// socket gives local operators the operator role, and nothing else gives
// transport roles), the roles and rule names a tailnet app capability
// grants.
//
// Authority comes only from where the docs say: the built-in operator
// role's baseline only from the transport (the local socket); unlock only
// from the transport or from a grant of the local policy that names the
// principal exactly (no glob). A capability never confers either.
type Subject struct {
	Principal string
	Aliases   []string
	// Roles are the roles the transport vouches for (local operators).
	Roles []string
	// CapRoles are the roles a tailnet app capability grants; the policy
	// must define them, and they never carry unlock or the operator role.
	CapRoles []string
	// Commands are allow-rule names granted by the transport (a tailnet
	// app capability). They imply the exec permission for those rules.
	Commands []string
}

// LocalOperator reports whether a local-socket user (by name and group
// names) is named by the policy as a local operator.
func (p *Policy) LocalOperator(user string, groups []string) bool {
	if slices.Contains(p.operatorUsers, user) {
		return true
	}
	for _, g := range groups {
		if slices.Contains(p.operatorGroups, g) {
			return true
		}
	}
	return false
}

// Roles returns the subject's roles: those its transport and its
// capabilities gave it plus those the policy's grants give its principal,
// deduplicated, in stable order. A capability's operator role is dropped.
func (p *Policy) Roles(s Subject) []string {
	var out []string
	p.eachRole(s, func(role string, _ bool) {
		if !slices.Contains(out, role) {
			out = append(out, role)
		}
	})
	return out
}

// HasRole reports whether the policy defines the role (the operator
// role is always defined).
func (p *Policy) HasRole(name string) bool {
	_, ok := p.roles[name]
	return ok || name == OperatorRole
}

// eachRole calls f for every role the subject holds, with whether that
// source may confer unlock: the transport, or a policy grant that names
// the principal (or an alias) exactly.
func (p *Policy) eachRole(s Subject, f func(role string, mayUnlock bool)) {
	for _, r := range s.Roles {
		f(r, true)
	}
	for _, r := range s.CapRoles {
		if r != OperatorRole {
			f(r, false)
		}
	}
	for _, g := range p.grants {
		if !matchAny(g.Principals, s.Principal) && !slices.ContainsFunc(s.Aliases, func(a string) bool { return matchAny(g.Principals, a) }) {
			continue
		}
		exact := namesExactly(g.Principals, s)
		for _, r := range g.Roles {
			f(r, exact)
		}
	}
}

// namesExactly reports whether one of the patterns is, without any glob
// character, the subject's principal or one of its aliases.
func namesExactly(patterns []string, s Subject) bool {
	for _, pat := range patterns {
		if strings.ContainsAny(pat, `*?[\`) {
			continue
		}
		if pat == s.Principal || slices.Contains(s.Aliases, pat) {
			return true
		}
	}
	return false
}

// Permissions returns the permissions the subject holds, in AllPermissions
// order. The operator baseline comes only with a transport's operator
// role; unlock only from a source that may confer it (see eachRole).
func (p *Policy) Permissions(s Subject) []Permission {
	have := map[Permission]bool{}
	for _, name := range s.Roles {
		if name == OperatorRole {
			for _, perm := range OperatorBaseline {
				have[perm] = true
			}
		}
	}
	p.eachRole(s, func(name string, mayUnlock bool) {
		r, ok := p.roles[name]
		if !ok {
			return
		}
		for _, perm := range r.Permissions {
			if perm != PermUnlock || mayUnlock {
				have[perm] = true
			}
		}
	})
	if len(p.grantedCommands(s)) > 0 {
		have[PermExec] = true
	}
	var out []Permission
	for _, perm := range AllPermissions {
		if have[perm] {
			out = append(out, perm)
		}
	}
	return out
}

// grantedCommands returns the subject's directly granted rule names that
// name allow rules of this policy: a capability can only grant what the
// policy defines.
func (p *Policy) grantedCommands(s Subject) []string {
	var out []string
	for _, name := range s.Commands {
		if slices.ContainsFunc(p.rules, func(r *Rule) bool { return r.Name == name && r.Effect == Allow }) {
			out = append(out, name)
		}
	}
	return out
}

// MayRelay reports whether the subject may relay descriptors for the
// sandbox: one of its roles carries the relay permission and lists the
// sandbox (or "*").
func (p *Policy) MayRelay(s Subject, sandbox string) bool {
	for _, name := range p.Roles(s) {
		r, ok := p.roles[name]
		if ok && slices.Contains(r.Permissions, PermRelay) &&
			(slices.Contains(r.Sandboxes, sandbox) || slices.Contains(r.Sandboxes, "*")) {
			return true
		}
	}
	return false
}

// SandboxPrincipal is the principal a relayed request runs as.
func SandboxPrincipal(sandbox string) string { return "sandbox:" + sandbox }

// SandboxNamePattern is the grammar of sandbox (signing key) names, as
// the filesystem protocol defines it.
var SandboxNamePattern = descriptor.SandboxNamePattern

// Allows reports whether the subject holds the permission.
func (p *Policy) Allows(s Subject, perm Permission) bool {
	return slices.Contains(p.Permissions(s), perm)
}

// Sandboxes lists the sandbox backends the policy's rules use, sorted.
func (p *Policy) Sandboxes() []string {
	var out []string
	for _, r := range p.rules {
		// Deny rules run nothing, so they use no sandbox.
		if r.Effect == Allow && !slices.Contains(out, r.Sandbox) {
			out = append(out, r.Sandbox)
		}
	}
	slices.Sort(out)
	return out
}

// CredentialBackends lists the keystore backends the allow rules'
// credentials and sections name, sorted.
func (p *Policy) CredentialBackends() []string {
	var out []string
	add := func(b string) {
		if !slices.Contains(out, b) {
			out = append(out, b)
		}
	}
	for _, r := range p.rules {
		if r.Effect != Allow {
			continue
		}
		for _, ref := range r.Credentials {
			add(ref.Backend)
		}
		for _, b := range r.sectionBackends() {
			add(b)
		}
	}
	slices.Sort(out)
	return out
}

// Rules returns the command rules in file order.
func (p *Policy) Rules() []*Rule { return slices.Clone(p.rules) }

// index builds byBinary.
func (p *Policy) index() {
	p.byBinary, p.byName = map[string][]*Rule{}, map[string][]*Rule{}
	for _, r := range p.rules {
		p.byName[r.Command()] = append(p.byName[r.Command()], r)
		paths := append(slices.Clone(r.Candidates), r.Resolved)
		if len(r.Candidates) == 0 {
			paths = []string{r.Binary, r.Resolved}
		}
		for i, b := range paths {
			if b != "" && !slices.Contains(paths[:i], b) {
				p.byBinary[b] = append(p.byBinary[b], r)
			}
		}
	}
}

// Concurrency is the server-wide cap on commands running at once.
func (p *Policy) Concurrency() int { return p.concurrency }

// PerPrincipal is the cap on one principal's commands running at once,
// and on its requests waiting for an approval or a slot.
func (p *Policy) PerPrincipal() int { return p.perPrincipal }

// Workspace returns the directory of a named workspace.
func (p *Policy) Workspace(name string) (string, bool) {
	dir, ok := p.workspaces[name]
	return dir, ok
}

// WorkspaceAtLoad is the named workspace's directory as it resolved when
// the policy was loaded (symbolic links followed then), or its configured
// path when it could not be resolved then. A workspace that resolves
// differently at run time had a link in its path changed since.
func (p *Policy) WorkspaceAtLoad(name string) string { return p.workspaceReal[name] }

func matchAny(globs []string, s string) bool {
	for _, g := range globs {
		if ok, err := path.Match(g, s); err == nil && ok {
			return true
		}
	}
	return false
}
