package server

import (
	"sync"
	"syscall"

	"coily.dev/coily/refusal"
)

// job is one admitted Exec: registered before its command starts, so that a
// Lockout can never miss it, and removed when it has been answered.
type job struct {
	id string

	mu   sync.Mutex
	pgid int          // process group, 0 until started
	stop refusal.Code // why coily stopped it, "" if it did not
	done bool
}

// started records the command's process group. It reports false when the
// job was stopped before it started, in which case the caller must kill the
// group at once.
func (j *job) started(pgid int) bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.pgid = pgid
	if j.stop != "" {
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		return false
	}
	return true
}

// finished marks the command's process group as gone, so later signals are
// not sent to a process group id the kernel may have reused.
func (j *job) finished() {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.done = true
}

// signal records why the job is being stopped (the first reason wins) and
// sends sig to its whole process group. Once the command has exited it does
// nothing: a command that finished is answered with its real exit status.
func (j *job) signal(sig syscall.Signal, why refusal.Code) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.done {
		return
	}
	if j.stop == "" {
		j.stop = why
	}
	if j.pgid > 0 {
		_ = syscall.Kill(-j.pgid, sig)
	}
}

// stopReason reports why coily stopped the job, "" if it did not.
func (j *job) stopReason() refusal.Code {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.stop
}
