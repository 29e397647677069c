package workspace

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

// ScratchPrefix names each command's private directory in the scratch
// directory.
const ScratchPrefix = "coily-exec-"

// PrepareScratch settles the scratch directory, makes it and removes what
// commands of a previous run left there (a crash). dir is the configured
// one; "" means "scratch" in stateDir (one server owns it, and every
// sandbox hides it), or, for a server running as root (its sandboxes run
// as user, not zero), RootScratchDir, where the sandbox's user can reach
// the files it binds. own is ownFiles with the scratch directory added
// when it is outside the state directory: hidden from every sandbox, as
// the state directory is.
func PrepareScratch(stateDir, dir string, user sandbox.User, ownFiles []string) (scratch string, own []string, err error) {
	owned := false
	if dir == "" && stateDir != "" {
		dir, owned = filepath.Join(stateDir, "scratch"), true
		if !user.IsZero() {
			dir = RootScratchDir(stateDir)
		}
	}
	if dir == "" {
		return "", ownFiles, nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", nil, fmt.Errorf("scratch dir: %w", err)
	}
	if err := openToSandbox(dir, user); err != nil {
		return "", nil, err
	}
	inState := stateDir != "" && (strings.HasPrefix(dir, filepath.Clean(stateDir)+string(filepath.Separator)) ||
		dir == stateDir)
	own = ownFiles
	if !inState {
		// Hidden from every sandbox, as the state directory is.
		own = append(slices.Clone(ownFiles), dir)
	}
	if !owned && !inState {
		return dir, own, nil // not ours alone: another server's commands may be there
	}
	if err := sweep(dir); err != nil {
		return "", nil, err
	}
	return dir, own, nil
}

// sweep removes what crashed commands left in the scratch directory.
func sweep(scratch string) error {
	entries, err := os.ReadDir(scratch)
	if err != nil {
		return fmt.Errorf("scratch dir: %w", err)
	}
	for _, e := range entries {
		dir := filepath.Join(scratch, e.Name())
		switch {
		case strings.HasPrefix(e.Name(), sandbox.MountPrefix):
			// A crashed command's idmapped workspace: detached, never
			// removed through.
			if err := RemoveMountDir(dir); err != nil {
				return fmt.Errorf("scratch dir: a crashed command's %s: %w", e.Name(), err)
			}
		case strings.HasPrefix(e.Name(), ScratchPrefix):
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

// RemoveMountDir detaches what is mounted under dir, then removes dir and
// the mount points in it, which are empty once detached: never a walk
// that could reach into a workspace.
func RemoveMountDir(dir string) error {
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

// RemoveScratch removes a root server's default scratch directory (dir
// is RootScratchDir of stateDir, and its sandboxes run as user, not zero)
// if it is empty. What a crash or a command still being torn down leaves,
// the next start with the same state directory removes.
func RemoveScratch(stateDir, dir string, user sandbox.User) {
	if !user.IsZero() && stateDir != "" && dir == RootScratchDir(stateDir) {
		_ = os.Remove(dir)
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

// openToSandbox lets a root server's sandbox user (u) through the scratch
// directory (mode 0711: it may pass, not list), after checking that the
// directory is the server's own and that the user can reach it. Files the
// sandbox is given from here are bound by path by bubblewrap, which runs
// as that user. Nothing to do for a server not running as root: its
// sandboxes run as itself.
func openToSandbox(dir string, u sandbox.User) error {
	if u.IsZero() {
		return nil
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("scratch dir: %w", err)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); !ok || !fi.IsDir() || int(st.Uid) != os.Geteuid() {
		return fmt.Errorf("scratch dir %s is not a directory of this server's user (uid %d): remove it, or name another", dir, os.Geteuid())
	}
	if err := os.Chmod(dir, 0o711); err != nil {
		return fmt.Errorf("scratch dir: %w", err)
	}
	if err := sandbox.CheckReachable("the scratch directory", filepath.Join(dir, "x"), u); err != nil {
		return fmt.Errorf("scratch dir: %w", err)
	}
	return nil
}

// PrivateDir makes a directory in parent named prefix and 128 random
// bits (see NewDir), with mode.
func PrivateDir(parent, prefix string, mode os.FileMode) (string, error) {
	dir, err := NewDir(parent, prefix)
	if err != nil || mode == 0o700 {
		return dir, err
	}
	if err := os.Chmod(dir, mode); err != nil {
		os.Remove(dir)
		return "", err
	}
	return dir, nil
}

// NewDir makes a new directory (0700) in parent named prefix and 128
// random bits: a root server's scratch directory is traversable by the
// sandbox's user (0711), so the name is what keeps any other process of
// that user from reaching an execution's sockets and files; os.MkdirTemp's
// 32 bits are too few to rely on.
func NewDir(parent, prefix string) (string, error) {
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
