package supervise

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"

	"coily.dev/coily/sandbox"
)

// SandboxUser settles who the sandboxes run as: for a server running as
// root, user or sandbox.DefaultUser, never root; for any other server,
// itself (the user stays zero, and giving one is a mistake said at once).
func SandboxUser(user sandbox.User, log *slog.Logger) (sandbox.User, error) {
	if os.Geteuid() != 0 {
		if !user.IsZero() {
			return user, fmt.Errorf("server: a sandbox user (%s) applies to a server running as root; this one runs as uid %d, and so do its sandboxes", user, os.Geteuid())
		}
		return user, nil
	}
	if user.IsZero() {
		user = sandbox.DefaultUser()
	}
	if err := user.Check(); err != nil {
		return user, fmt.Errorf("server: %w", err)
	}
	log.Info("running as root: every sandbox runs as an unprivileged user", "sandbox_user", user.String())
	return user, nil
}

// UIDs makes the pool a root server (whose sandboxes run as user) gives
// each command a uid of its own from, first and count (both zero:
// sandbox.DefaultUIDFirst and DefaultUIDCount), unless off; a server not
// running as root has none (its commands run as itself).
func UIDs(user sandbox.User, first, count int, off bool, log *slog.Logger) (*sandbox.UIDPool, error) {
	if user.IsZero() || off {
		return nil, nil
	}
	if first == 0 && count == 0 {
		first, count = sandbox.DefaultUIDFirst, sandbox.DefaultUIDCount
	}
	p, err := sandbox.NewUIDPool(first, count, user)
	if err != nil {
		return nil, fmt.Errorf("server: %w", err)
	}
	log.Info("every sandboxed command runs as a uid of its own", "first", first, "count", count,
		"files_owned_by", user.String())
	return p, nil
}

// Sandboxes is the default registry of a server with stateDir, with a
// cgroup v2 subtree for the commands' cgroups when the server has one;
// command cgroups a crash left behind are killed and removed.
func Sandboxes(stateDir string, log *slog.Logger) sandbox.Registry {
	reg := sandbox.DefaultRegistry()
	sum := sha256.Sum256([]byte(stateDir))
	g, err := sandbox.FindCgroups(hex.EncodeToString(sum[:4]))
	if err != nil {
		log.Info("resource limits are rlimits only", "reason", err)
		return reg
	}
	if n := g.Cleanup(); n > 0 {
		log.Warn("removed command cgroups a previous run left behind", "count", n)
	}
	log.Info("commands run in cgroups", "dir", g.Dir, "memory", g.Memory, "pids", g.Pids)
	return reg.WithCgroups(g)
}
