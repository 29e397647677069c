package server

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"coily.dev/coily/sandbox"
)

// scratchPrefix names each command's private directory in ScratchDir.
const scratchPrefix = "coily-exec-"

// prepareScratch makes the scratch directory (by default "scratch" in the
// state directory: one server owns it, and every sandbox hides it) and
// removes what commands of a previous run left there (a crash).
func prepareScratch(cfg *Config) error {
	if cfg.ScratchDir == "" && cfg.StateDir != "" {
		cfg.ScratchDir = filepath.Join(cfg.StateDir, "scratch")
	}
	if cfg.ScratchDir == "" {
		return nil
	}
	if err := os.MkdirAll(cfg.ScratchDir, 0o700); err != nil {
		return fmt.Errorf("scratch dir: %w", err)
	}
	if cfg.StateDir == "" || !strings.HasPrefix(cfg.ScratchDir, filepath.Clean(cfg.StateDir)+string(filepath.Separator)) &&
		cfg.ScratchDir != cfg.StateDir {
		return nil // not ours alone: another server's commands may be there
	}
	entries, err := os.ReadDir(cfg.ScratchDir)
	if err != nil {
		return fmt.Errorf("scratch dir: %w", err)
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), scratchPrefix) {
			if err := os.RemoveAll(filepath.Join(cfg.ScratchDir, e.Name())); err != nil {
				return fmt.Errorf("scratch dir: remove a crashed command's %s: %w", e.Name(), err)
			}
		}
	}
	return nil
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
