package server

import (
	"context"
	"errors"
	"fmt"
	"os"

	"coily.dev/coily/refusal"
	"coily.dev/coily/sandbox"
	"coily.dev/coily/workspace"
)

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
