package stops

import (
	"context"
	"maps"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"coily.dev/coily/refusal"
	"coily.dev/coily/sandbox"
)

// Job is one admitted Exec: registered before its command starts, so that a
// Lockout can never miss it, and removed when it has been answered.
type Job struct {
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

// Started records the command's process group and sandbox. It reports
// false when the job was stopped before it started, in which case the
// group has been killed and the caller must not let the command run.
func (j *Job) Started(pgid int, conf *sandbox.Confinement) bool {
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

// Finished marks the command's process group as gone, so later signals are
// not sent to a process group id the kernel may have reused.
func (j *Job) Finished() {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.done = true
}

// Signal records why the job is being stopped (the first reason wins) and
// sends sig to its whole process group and sandbox. Once the command has
// exited it does nothing: a command that finished is answered with its
// real exit status. It reports whether a running command was signalled.
func (j *Job) Signal(sig syscall.Signal, why refusal.Code) bool {
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

// Info describes the job.
func (j *Job) Info() ExecInfo {
	j.mu.Lock()
	defer j.mu.Unlock()
	return ExecInfo{RequestID: j.id, Principal: j.principal, Argv: slices.Clone(j.argv), Rule: j.rule,
		Admitted: j.admitted, Running: j.pgid > 0 && !j.done, ApprovalID: j.approval}
}

// Decided records the rule that allowed the job, and the approval it waits
// for (empty: none).
func (j *Job) Decided(rule, approval string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.rule, j.approval = rule, approval
}

// Ended reports whether the job's command has exited.
func (j *Job) Ended() bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.done
}

// StopReason reports why coily stopped the job, "" if it did not.
func (j *Job) StopReason() refusal.Code {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.stop
}

// ErrKilled is the cause of a request's context ended by a kill before
// its command ran.
var ErrKilled = refusal.New(refusal.CommandKilled, "killed before it ran")

// Kill stops one admitted request by its id: a running command's process
// group and sandbox get SIGTERM, then SIGKILL after the kill grace, as in
// a lockout; one that has not started (waiting for an approval or a slot)
// never starts, and its wait ends. It returns the job as it was found and
// whether its command was running; an id with no job, or whose command has
// ended, is refused (bad-request).
func (c *Controls) Kill(id string) (info ExecInfo, running bool, err error) {
	c.mu.Lock()
	j := c.jobs[id]
	c.mu.Unlock()
	switch {
	case j == nil:
		return ExecInfo{}, false, refusal.New(refusal.BadRequest, "no command with request id %q is in flight", id)
	case j.Ended():
		return ExecInfo{}, false, refusal.New(refusal.BadRequest, "request %s has already ended", id)
	}
	info = j.Info()
	running = j.Signal(syscall.SIGTERM, refusal.CommandKilled)
	if running {
		c.escalate([]*Job{j}, refusal.CommandKilled, c.cfg.KillGrace, nil) // SIGKILL after the grace (the first reason stays)
	} else if j.cancel != nil {
		j.cancel(ErrKilled) // ends a wait for an approval or a slot
	}
	return info, running, nil
}

// InFlight lists the requests admitted and not yet answered, oldest
// first.
func (c *Controls) InFlight() []ExecInfo {
	c.mu.Lock()
	jobs := slices.Collect(maps.Values(c.jobs))
	c.mu.Unlock()
	out := make([]ExecInfo, 0, len(jobs))
	for _, j := range jobs {
		out = append(out, j.Info())
	}
	slices.SortFunc(out, func(a, b ExecInfo) int {
		if c := a.Admitted.Compare(b.Admitted); c != 0 {
			return c
		}
		return strings.Compare(a.RequestID, b.RequestID)
	})
	return out
}
