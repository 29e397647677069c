package server

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"

	"coily.dev/coily/refusal"
	"coily.dev/coily/sandbox"
	"coily.dev/coily/workspace"
)

// chooseSandboxUser settles who the sandboxes run as: for a server running
// as root, the configured user or sandbox.DefaultUser, never root; for
// any other server, itself (the field stays zero, and setting it is a
// mistake said at once).
func chooseSandboxUser(cfg *Config) error {
	if os.Geteuid() != 0 {
		if !cfg.SandboxUser.IsZero() {
			return fmt.Errorf("server: a sandbox user (%s) applies to a server running as root; this one runs as uid %d, and so do its sandboxes", cfg.SandboxUser, os.Geteuid())
		}
		return nil
	}
	if cfg.SandboxUser.IsZero() {
		cfg.SandboxUser = sandbox.DefaultUser()
	}
	if err := cfg.SandboxUser.Check(); err != nil {
		return fmt.Errorf("server: %w", err)
	}
	cfg.Logger.Info("running as root: every sandbox runs as an unprivileged user", "sandbox_user", cfg.SandboxUser.String())
	return nil
}

// sandboxUIDs makes the pool a root server gives each command a uid of
// its own from, unless told not to; a server not running as root has none
// (its commands run as itself).
func sandboxUIDs(cfg Config) (*sandbox.UIDPool, error) {
	r := cfg.SandboxUIDs
	if cfg.SandboxUser.IsZero() || r.Off {
		return nil, nil
	}
	if r.First == 0 && r.Count == 0 {
		r.First, r.Count = sandbox.DefaultUIDFirst, sandbox.DefaultUIDCount
	}
	p, err := sandbox.NewUIDPool(r.First, r.Count, cfg.SandboxUser)
	if err != nil {
		return nil, fmt.Errorf("server: %w", err)
	}
	cfg.Logger.Info("every sandboxed command runs as a uid of its own", "first", r.First, "count", r.Count,
		"files_owned_by", cfg.SandboxUser.String())
	return p, nil
}

// chooseUser settles who the execution's sandbox runs as on the host: for
// a root server, a uid of its own from the pool (bubblewrap only),
// released once none of its processes is left; else the sandbox user, or
// the server itself.
func (s *Server) chooseUser(_ context.Context, x *execution) error {
	x.user = s.cfg.SandboxUser
	if s.uids == nil || x.box.Name() != (sandbox.Bwrap{}).Name() {
		return nil
	}
	u, err := s.uids.Acquire()
	if err != nil {
		return refusal.Wrap(refusal.ConcurrencyBusy, err, "no sandbox uid is free")
	}
	x.user, x.dynamic = u, true
	x.onDone(func() {
		s.uids.Release(u, func(err error) { s.log.Error("sandbox uid kept", "err", err) })
	})
	return nil
}

// giveToSandbox makes a file the server created for a sandbox (the egress
// proxy's socket, the known hosts file) the execution's sandbox user's, so
// that a root server's sandbox can use it through the descriptor it is
// bound by: the file stays in the server's private directory, which the
// sandbox's user cannot reach by path. A server not running as root has
// nothing to give: its sandboxes run as itself.
func (s *Server) giveToSandbox(x *execution, path string) error {
	u := x.user
	if u.IsZero() {
		return nil
	}
	if err := os.Lchown(path, u.UID, u.GID); err != nil {
		return fmt.Errorf("give %s to the sandbox's user (%s): %w", path, u, err)
	}
	return nil
}

// accessRefusal turns a path the sandbox's user cannot use (a workspace
// it cannot write or reach, a file it cannot reach) into a refusal's
// message, naming the policy's workspace when that is the path.
func accessRefusal(x *execution, err error) (string, bool) {
	var ae *sandbox.AccessError
	if !errors.As(err, &ae) {
		return "", false
	}
	if ae.What == "workspace" && x.rule.Workspace != "" {
		return fmt.Sprintf("workspace %q of rule %q: %v", x.rule.Workspace, x.rule.Name, err), true
	}
	return fmt.Sprintf("rule %q: %v", x.rule.Name, err), true
}

// dynamicUser is the profile's uid of the execution's own, with a private
// directory (0711, for the command's uid to pass) its workspace's
// idmapped mount is attached in, detached and removed once the execution
// is over; nil when it has none.
func (s *Server) dynamicUser(x *execution) (*sandbox.Dynamic, error) {
	if !x.dynamic {
		return nil, nil
	}
	dir, err := workspace.PrivateDir(s.cfg.ScratchDir, sandbox.MountPrefix, 0o711)
	if err != nil {
		return nil, refusal.Wrap(refusal.Internal, err, "could not create the workspace's mount directory")
	}
	x.onDone(func() {
		if err := workspace.RemoveMountDir(dir); err != nil {
			s.log.Error("mount directory left in place", "dir", dir, "err", err)
		}
	})
	return &sandbox.Dynamic{Pool: s.uids, User: x.user, MountDir: dir}, nil
}

// serverSandboxes is the default registry, with a cgroup v2 subtree for
// the commands' cgroups when the server has one; command cgroups a crash
// left behind are killed and removed.
func serverSandboxes(cfg Config) sandbox.Registry {
	reg := sandbox.DefaultRegistry()
	sum := sha256.Sum256([]byte(cfg.StateDir))
	g, err := sandbox.FindCgroups(hex.EncodeToString(sum[:4]))
	if err != nil {
		cfg.Logger.Info("resource limits are rlimits only", "reason", err)
		return reg
	}
	if n := g.Cleanup(); n > 0 {
		cfg.Logger.Warn("removed command cgroups a previous run left behind", "count", n)
	}
	cfg.Logger.Info("commands run in cgroups", "dir", g.Dir, "memory", g.Memory, "pids", g.Pids)
	return reg.WithCgroups(g)
}
