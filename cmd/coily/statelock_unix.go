//go:build unix

package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// lockStateDir creates dir if missing (0700) and takes an exclusive flock
// on dir/coily.lock without waiting. When another process holds it, the
// error wraps errStateDirBusy and names the directory and, when the holder
// has written it, its PID; nothing in the directory has been changed then.
func lockStateDir(dir string) (*stateLock, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("state dir: %w", err)
	}
	path := filepath.Join(dir, stateLockFile)
	// O_NOFOLLOW: a symbolic link planted as the lock file is refused, not
	// followed; O_NONBLOCK: a FIFO planted there cannot hang the open.
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0o600)
	if err != nil {
		return nil, fmt.Errorf("state dir lock %s: %w", path, err)
	}
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("state dir lock %s: not a regular file (%v)", path, err)
	}
	if err := flock(f); err != nil {
		holder := readHolder(f)
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %s is held by another coily (%s; lock %s): stop it first, or use another --state-dir",
				errStateDirBusy, dir, holder, path)
		}
		return nil, fmt.Errorf("state dir lock %s: %w", path, err)
	}
	// Ours now: record who holds it, for the next one's error message.
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return &stateLock{f: f}, nil
}

// lockWait bounds how long a held lock is retried. A server killed with
// SIGKILL releases it when its last descriptor closes, and a child it had
// forked but not yet exec'd (or killed) still shares that descriptor for a
// moment: a restart right after a crash waits that moment out instead of
// failing; a live holder is still reported within a second.
const lockWait = time.Second

// flock takes the lock, retrying a held one for lockWait and EINTR always.
func flock(f *os.File) error {
	deadline := time.Now().Add(lockWait)
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		switch {
		case errors.Is(err, syscall.EINTR):
		case errors.Is(err, syscall.EWOULDBLOCK) && time.Now().Before(deadline):
			time.Sleep(20 * time.Millisecond)
		default:
			return err
		}
	}
}
