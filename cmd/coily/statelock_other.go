//go:build !unix

package main

import (
	"errors"
	"os"
)

// lockStateDir needs flock: without it, refuse rather than run unlocked.
func lockStateDir(dir string) (*stateLock, error) {
	return nil, errors.New("locking the state directory " + dir + " needs a Unix system")
}

// ownerOf is unknown without Unix file owners.
func ownerOf(os.FileInfo) (int, bool) { return 0, false }
