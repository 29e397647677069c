package server

import (
	"errors"
	"fmt"
	"net"
	"os"

	"coily.dev/coily/sandbox"
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

// giveToSandbox makes a file the server created for a sandbox (the egress
// proxy's socket, the known hosts file) the sandbox user's, so that a
// root server's sandbox can use it through the descriptor it is bound by:
// the file stays in the server's private directory, which the sandbox's
// user cannot reach by path. A server not running as root has nothing to
// give: its sandboxes run as itself.
func (s *Server) giveToSandbox(path string) error {
	u := s.cfg.SandboxUser
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

// listenUnix listens on a unix socket at path that only its owner may
// connect to (0600, whatever the umask), for giveToSandbox to hand to
// the sandbox's user: no other process of that user, or of the server's
// group, reaches an exec's agent or proxy through it. (Between bind and
// chmod it has the umask's mode, in a directory whose 128-bit random name
// nobody else knows: see scratchDir.)
func listenUnix(path string) (net.Listener, error) {
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(path, 0o600); err != nil {
		l.Close()
		return nil, fmt.Errorf("socket %s: %w", path, err)
	}
	return l, nil
}
