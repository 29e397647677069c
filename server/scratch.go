package server

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"coily.dev/coily/sandbox"
)

// scratchPrefix names each command's private directory in ScratchDir.
const scratchPrefix = "coily-exec-"

// prepareScratch makes the scratch directory and removes what commands of
// a previous run left there (a crash). By default it is "scratch" in the
// state directory (one server owns it, and every sandbox hides it); a
// server running as root keeps it outside (RootScratchDir), where the
// sandbox's user can reach the files it binds (see giveToSandbox).
func prepareScratch(cfg *Config) error {
	owned := false
	if cfg.ScratchDir == "" && cfg.StateDir != "" {
		cfg.ScratchDir, owned = filepath.Join(cfg.StateDir, "scratch"), true
		if !cfg.SandboxUser.IsZero() {
			cfg.ScratchDir = RootScratchDir(cfg.StateDir)
		}
	}
	if cfg.ScratchDir == "" {
		return nil
	}
	if err := os.MkdirAll(cfg.ScratchDir, 0o700); err != nil {
		return fmt.Errorf("scratch dir: %w", err)
	}
	if err := openScratchToSandbox(cfg); err != nil {
		return err
	}
	inState := cfg.StateDir != "" && (strings.HasPrefix(cfg.ScratchDir, filepath.Clean(cfg.StateDir)+string(filepath.Separator)) ||
		cfg.ScratchDir == cfg.StateDir)
	if !inState {
		// Hidden from every sandbox, as the state directory is.
		cfg.OwnFiles = append(slices.Clone(cfg.OwnFiles), cfg.ScratchDir)
	}
	if !owned && !inState {
		return nil // not ours alone: another server's commands may be there
	}
	entries, err := os.ReadDir(cfg.ScratchDir)
	if err != nil {
		return fmt.Errorf("scratch dir: %w", err)
	}
	for _, e := range entries {
		dir := filepath.Join(cfg.ScratchDir, e.Name())
		switch {
		case strings.HasPrefix(e.Name(), sandbox.MountPrefix):
			// A crashed command's idmapped workspace: detached, never
			// removed through.
			if err := removeMountDir(dir); err != nil {
				return fmt.Errorf("scratch dir: a crashed command's %s: %w", e.Name(), err)
			}
		case strings.HasPrefix(e.Name(), scratchPrefix):
			if err := sandbox.DetachUnder(dir); err != nil {
				return fmt.Errorf("scratch dir: a crashed command's %s: %w", e.Name(), err)
			}
			if err := os.RemoveAll(dir); err != nil {
				return fmt.Errorf("scratch dir: remove a crashed command's %s: %w", e.Name(), err)
			}
		}
	}
	return nil
}

// removeMountDir detaches what is mounted under dir, then removes dir and
// the mount points in it, which are empty once detached: never a walk
// that could reach into a workspace.
func removeMountDir(dir string) error {
	if err := sandbox.DetachUnder(dir); err != nil {
		return err
	}
	entries, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	for _, e := range entries {
		if err := os.Remove(filepath.Join(dir, e.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	if err := os.Remove(dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// ScratchDir is where each command's private directories are made.
func (s *Server) ScratchDir() string { return s.cfg.ScratchDir }

// RemoveScratch removes a root server's default scratch directory if it
// is empty: Shutdown tries, and the caller again once every call has
// ended (the gRPC server stopped). What a crash or a command still being
// torn down leaves, the next start with the same state directory removes.
func (s *Server) RemoveScratch() {
	if !s.cfg.SandboxUser.IsZero() && s.cfg.StateDir != "" && s.cfg.ScratchDir == RootScratchDir(s.cfg.StateDir) {
		_ = os.Remove(s.cfg.ScratchDir)
	}
}

// RootScratchDir is the scratch directory of a server running as root
// with stateDir: outside the state directory, which stays private, in
// /run (or the temporary directory where /run is not root's alone), named
// after the state directory.
func RootScratchDir(stateDir string) string {
	base := os.TempDir()
	if fi, err := os.Lstat("/run"); err == nil && fi.IsDir() && fi.Mode().Perm()&0o022 == 0 {
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Uid == 0 {
			base = "/run"
		}
	}
	sum := sha256.Sum256([]byte(filepath.Clean(stateDir)))
	return filepath.Join(base, "coily-"+hex.EncodeToString(sum[:4]))
}

// openScratchToSandbox lets a root server's sandbox user through the
// scratch directory (mode 0711: it may pass, not list), after checking
// that the directory is the server's own and that the user can reach it.
// Files the sandbox is given from here are bound by path by bubblewrap,
// which runs as that user. Nothing to do for a server not running as
// root: its sandboxes run as itself.
func openScratchToSandbox(cfg *Config) error {
	u := cfg.SandboxUser
	if u.IsZero() {
		return nil
	}
	fi, err := os.Lstat(cfg.ScratchDir)
	if err != nil {
		return fmt.Errorf("scratch dir: %w", err)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); !ok || !fi.IsDir() || int(st.Uid) != os.Geteuid() {
		return fmt.Errorf("scratch dir %s is not a directory of this server's user (uid %d): remove it, or name another", cfg.ScratchDir, os.Geteuid())
	}
	if err := os.Chmod(cfg.ScratchDir, 0o711); err != nil {
		return fmt.Errorf("scratch dir: %w", err)
	}
	if err := sandbox.CheckReachable("the scratch directory", filepath.Join(cfg.ScratchDir, "x"), u); err != nil {
		return fmt.Errorf("scratch dir: %w", err)
	}
	return nil
}

// privateDir makes a directory for one execution in the scratch
// directory: private to the server, except that a root server's sandbox
// user may pass through it (0711) to reach the files given to it.
func (s *Server) privateDir() (string, error) {
	mode := os.FileMode(0o700)
	if !s.cfg.SandboxUser.IsZero() {
		mode = 0o711
	}
	return newPrivateDir(s.cfg.ScratchDir, scratchPrefix, mode)
}

// newPrivateDir makes a directory in parent named prefix and 128 random
// bits (see scratchDir), with mode.
func newPrivateDir(parent, prefix string, mode os.FileMode) (string, error) {
	dir, err := scratchDir(parent, prefix)
	if err != nil || mode == 0o700 {
		return dir, err
	}
	if err := os.Chmod(dir, mode); err != nil {
		os.Remove(dir)
		return "", err
	}
	return dir, nil
}

// scratchDir makes a new directory (0700) in parent named scratchPrefix and
// 128 random bits: a root server's scratch directory is traversable by the
// sandbox's user (0711), so the name is what keeps any other process of
// that user from reaching an execution's sockets and files; os.MkdirTemp's
// 32 bits are too few to rely on.
func scratchDir(parent, prefix string) (string, error) {
	for range 8 {
		b := make([]byte, 16)
		if _, err := rand.Read(b); err != nil {
			return "", err
		}
		dir := filepath.Join(parent, prefix+hex.EncodeToString(b))
		switch err := os.Mkdir(dir, 0o700); {
		case err == nil:
			return dir, nil
		case !errors.Is(err, fs.ErrExist):
			return "", err
		}
	}
	return "", fmt.Errorf("scratch dir: no free name in %s", parent)
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
