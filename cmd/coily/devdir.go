//go:build coilydev

package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"syscall"

	"coily.dev/coily/cli"
)

// devStateDir is the state directory `coily dev` runs in: the one given
// with --state-dir or COILY_STATE_DIR, else a private per-user one (see
// defaultDevStateDir), never `coily serve`'s default for root. It refuses
// the production state directory even when it is given: the dev policy
// lets any local process act as the owner.
func devStateDir(e *env) (string, error) {
	dir := e.global.StateDir
	if !stateDirGiven(e) {
		euid := os.Geteuid()
		dir = defaultDevStateDir(euid, os.Getenv("XDG_RUNTIME_DIR"), os.TempDir())
		if err := claimDevDir(dir, euid); err != nil {
			return "", err
		}
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	if isProductionStateDir(abs) {
		return "", fmt.Errorf("refusing to run in %s, the production state directory: pass another --state-dir", abs)
	}
	return abs, nil
}

// defaultDevStateDir is RUNTIME/coily-dev when runtimeDir
// ($XDG_RUNTIME_DIR) is an absolute path to a directory euid owns, else
// TMP/coily-dev-EUID: per user, root included, and never /var/lib/coily.
func defaultDevStateDir(euid int, runtimeDir, tmp string) string {
	if filepath.IsAbs(runtimeDir) {
		if fi, err := os.Stat(runtimeDir); err == nil && fi.IsDir() {
			if uid, ok := ownerOf(fi); ok && uid == euid {
				return filepath.Join(runtimeDir, "coily-dev")
			}
		}
	}
	return filepath.Join(tmp, "coily-dev-"+strconv.Itoa(euid))
}

// claimDevDir creates the default dev directory, or accepts it when it is
// already a real directory (not a symbolic link) that euid owns: in a
// shared /tmp another user could have put something there first.
func claimDevDir(dir string, euid int) error {
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("state dir: %w", err)
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("state dir: %w", err)
	}
	if uid, ok := ownerOf(fi); !fi.IsDir() || (ok && uid != euid) {
		return fmt.Errorf("state dir %s is not a directory of yours (a symbolic link, a file, or another user's): remove it or pass --state-dir", dir)
	}
	return nil
}

// isProductionStateDir says whether dir is /var/lib/coily, by name or
// through symbolic links.
func isProductionStateDir(dir string) bool {
	if filepath.Clean(dir) == cli.ProductionStateDir {
		return true
	}
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return false
	}
	prod, err := filepath.EvalSymlinks(cli.ProductionStateDir)
	return err == nil && real == prod
}

// ownerOf is the uid owning the file fi describes.
func ownerOf(fi os.FileInfo) (int, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return int(st.Uid), true
}

// stateDirGiven says whether --state-dir or COILY_STATE_DIR named the
// state directory (`coily dev` picks its own otherwise).
func stateDirGiven(e *env) bool {
	if e.app != nil && e.app.GivenOnCommandLine("state-dir") {
		return true
	}
	_, ok := os.LookupEnv("COILY_STATE_DIR")
	return ok
}
