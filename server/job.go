package server

import (
	"context"
	"slices"
	"sync"
	"syscall"
	"time"

	"coily.dev/coily/refusal"
	"coily.dev/coily/sandbox"
)

// job is one admitted Exec: registered before its command starts, so that a
// Lockout can never miss it, and removed when it has been answered.
type job struct {
	id string
	// What the web console lists of it: who asked, for what, since when.
	principal string
	argv      []string
	admitted  time.Time
	// cancel ends the execution's context: a kill of a command that has
	// not started (one waiting for an approval or a slot) ends the wait.
	cancel context.CancelCauseFunc

	mu       sync.Mutex
	rule     string               // the rule that allowed it, once decided
	approval string               // the approval it waits for, if any
	pgid     int                  // process group, 0 until started
	conf     *sandbox.Confinement // the command's sandbox, once started
	stop     refusal.Code         // why coily stopped it, "" if it did not
	done     bool
}

// started records the command's process group and sandbox. It reports
// false when the job was stopped before it started, in which case the
// group has been killed and the caller must not let the command run.
func (j *job) started(pgid int, conf *sandbox.Confinement) bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.pgid, j.conf = pgid, conf
	if j.stop != "" {
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		conf.Signal(syscall.SIGKILL)
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
// sends sig to its whole process group and sandbox. Once the command has
// exited it does nothing: a command that finished is answered with its
// real exit status. It reports whether a running command was signalled.
func (j *job) signal(sig syscall.Signal, why refusal.Code) bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.done {
		return false
	}
	if j.stop == "" {
		j.stop = why
	}
	if j.pgid <= 0 {
		return false
	}
	if !j.conf.Running() {
		sig = syscall.SIGKILL // its command has not started: nothing to let finish
	}
	_ = syscall.Kill(-j.pgid, sig)
	j.conf.Signal(sig)
	return true
}

// ExecInfo describes one admitted Exec for the web console: who asked,
// what runs, and where it is in the pipeline.
type ExecInfo struct {
	RequestID string
	Principal string
	Argv      []string
	// Rule is the rule that allowed it; empty while undecided.
	Rule     string
	Admitted time.Time
	// Running is true once its command started and until it ends.
	Running bool
	// ApprovalID names the approval it waits for, if any.
	ApprovalID string
}

// info describes the job.
func (j *job) info() ExecInfo {
	j.mu.Lock()
	defer j.mu.Unlock()
	return ExecInfo{RequestID: j.id, Principal: j.principal, Argv: slices.Clone(j.argv), Rule: j.rule,
		Admitted: j.admitted, Running: j.pgid > 0 && !j.done, ApprovalID: j.approval}
}

// decided records the rule that allowed the job, and the approval it waits
// for (empty: none).
func (j *job) decided(rule, approval string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.rule, j.approval = rule, approval
}

// ended reports whether the job's command has exited.
func (j *job) ended() bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.done
}

// stopReason reports why coily stopped the job, "" if it did not.
func (j *job) stopReason() refusal.Code {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.stop
}
