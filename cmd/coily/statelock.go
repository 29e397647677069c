package main

import (
	"errors"
	"io"
	"os"
	"strconv"
	"strings"

	"coily.dev/coily/cli"
)

// stateLockFile is the lock file inside a state directory. It stays after
// its holder exits (removing it would race with the next holder); the lock
// is the flock on it, which the kernel drops when the holder dies.
const stateLockFile = "coily.lock"

// exitStateDirBusy is the exit code of `coily serve` and `coily dev` when
// another process holds the state directory.
const exitStateDirBusy = cli.ExitStateBusy

// errStateDirBusy is wrapped by lockStateDir's error when another process
// holds the lock.
var errStateDirBusy = errors.New("state directory in use")

// stateLock holds a state directory for one process: `coily serve` and
// `coily dev` take it before they create or change anything in it, and keep
// it until they exit.
type stateLock struct {
	f *os.File
}

// readHolder describes the process holding the lock from the PID it wrote.
func readHolder(f *os.File) string {
	buf := make([]byte, 32)
	n, err := f.ReadAt(buf, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return "PID unknown"
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(buf[:n])))
	if err != nil || pid <= 0 {
		return "PID unknown"
	}
	return "PID " + strconv.Itoa(pid)
}

// Close releases the lock (exiting does too).
func (l *stateLock) Close() error { return l.f.Close() }
