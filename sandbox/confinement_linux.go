package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// startTimeout bounds how long bwrap may take to build a sandbox.
const startTimeout = 30 * time.Second

// Start opens the start gate of a sandbox whose bwrap (proc) has started:
// once bwrap has created the sandbox's first process, that process is
// bounded (its cgroup, its rlimits, inherited by everything it starts)
// and only then allowed to run the command. An error wraps ErrUnavailable;
// the caller kills the process group and reads Setup for bwrap's reason.
// A sandbox killed before its gate opened (Kill) never runs the command.
func (c *Confinement) Start(ctx context.Context, proc *os.Process) error {
	if c == nil || c.release == nil {
		return nil
	}
	c.mu.Lock()
	c.bwrap = proc
	killed := c.killed
	c.mu.Unlock()
	if killed {
		c.Signal(syscall.SIGKILL)
		return fmt.Errorf("%w: the sandbox was killed before it started", ErrUnavailable)
	}
	pid := proc.Pid
	deadline, ok := ctx.Deadline()
	if !ok || time.Until(deadline) > startTimeout {
		deadline = time.Now().Add(startTimeout)
	}
	_ = c.status.SetReadDeadline(deadline)
	c.statusDec = json.NewDecoder(io.LimitReader(c.status, 64<<10))
	var first map[string]any
	if err := c.statusDec.Decode(&first); err != nil {
		return fmt.Errorf("%w: bwrap did not start a sandbox: %v", ErrUnavailable, err)
	}
	_ = c.status.SetReadDeadline(time.Time{})
	if _, ok := first["child-pid"]; !ok {
		return fmt.Errorf("%w: bwrap reported %v before its child", ErrUnavailable, first)
	}
	init, err := onlyChild(pid)
	if err == nil && c.ownProc {
		init, err = onlyChild(init) // unshare's child is bwrap
	}
	if err != nil {
		return fmt.Errorf("%w: the sandbox's first process: %v", ErrUnavailable, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.killed {
		return fmt.Errorf("%w: the sandbox was killed before it started", ErrUnavailable)
	}
	c.initPid = init
	if err := c.bound(); err != nil {
		return fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	if _, err := c.release.Write([]byte{1}); err != nil {
		return fmt.Errorf("%w: start the sandbox: %v", ErrUnavailable, err)
	}
	c.release.Close()
	c.release = nil
	c.started = true
	return nil
}

// onlyChild returns the one child of pid (bwrap's, the sandbox's init).
func onlyChild(pid int) (int, error) {
	p := strconv.Itoa(pid)
	data, err := os.ReadFile("/proc/" + p + "/task/" + p + "/children")
	if err != nil {
		return 0, err
	}
	f := strings.Fields(string(data))
	if len(f) != 1 {
		return 0, fmt.Errorf("bwrap has %d children, want 1", len(f))
	}
	return strconv.Atoi(f[0])
}

// bound applies the rlimits to the sandbox's init before it starts the
// command (everything it starts inherits them); its cgroup, if any, it
// was born in.
func (c *Confinement) bound() error {
	if c.dynamic != nil || c.ownProc {
		return nil // bwrap was started under them (rlimitArgs)
	}
	for _, s := range c.limits.rlimits() {
		lim := unix.Rlimit{Cur: uint64(s.v), Max: uint64(s.v)}
		if err := unix.Prlimit(c.initPid, s.res, &lim, nil); err != nil {
			return fmt.Errorf("prlimit %d: %w", s.res, err)
		}
	}
	return nil
}

// rlimit is one resource limit to set.
type rlimit struct {
	res  int
	name string // prlimit(1)'s option
	v    int64
}

// rlimits are the limits l sets per process.
func (l Limits) rlimits() []rlimit {
	cpu := int64((l.CPU + time.Second - 1) / time.Second)
	var out []rlimit
	for _, s := range []rlimit{
		{unix.RLIMIT_NOFILE, "nofile", l.OpenFiles}, {unix.RLIMIT_FSIZE, "fsize", l.FileSize}, {unix.RLIMIT_CORE, "core", 0},
		{unix.RLIMIT_NPROC, "nproc", l.Processes}, {unix.RLIMIT_DATA, "data", l.Memory}, {unix.RLIMIT_CPU, "cpu", cpu},
	} {
		if s.v > 0 || s.res == unix.RLIMIT_CORE {
			out = append(out, s)
		}
	}
	return out
}

// rlimitArgs starts bwrap, for a command with a uid of its own, under the
// rlimits through prlimit(1), which sets them on itself and runs bwrap:
// bwrap's user namespace is then that uid's, and root has no capability
// over its processes by ownership (setting a limit on the sandbox's init
// at the start gate would need CAP_SYS_RESOURCE, which containers and
// hardened hosts withhold). Everything of the sandbox inherits them.
func rlimitArgs(prlimit string, l Limits, bwrap string, args []string) (string, []string) {
	argv := []string{"prlimit"}
	for _, s := range l.rlimits() {
		v := strconv.FormatInt(s.v, 10)
		argv = append(argv, "--"+s.name+"="+v+":"+v)
	}
	argv = append(argv, "--", bwrap)
	return prlimit, append(argv, args...)
}

// Signal sends sig to the sandbox's processes. SIGKILL kills them all
// (cgroup.kill, and bwrap, whose death ends its PID namespace); other
// signals reach the command and what it started (the inits of the
// sandbox's namespaces ignore them).
func (c *Confinement) Signal(sig syscall.Signal) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.started {
		sig = syscall.SIGKILL // the command has not run: nothing to let finish
	}
	if sig == syscall.SIGKILL || c.initPid <= 0 {
		c.killLocked()
		return
	}
	pids := descendants(c.initPid)
	if len(pids) == 0 {
		// The command has not forked from the sandbox's init yet (or has
		// ended): nothing to terminate gracefully.
		c.killLocked()
		return
	}
	for _, pid := range pids {
		_ = unix.Kill(pid, sig)
	}
}

// Kill SIGKILLs every process of the sandbox; one whose start gate is not
// open yet never runs its command.
func (c *Confinement) Kill() {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.killLocked()
}

// killLocked kills the sandbox: its cgroup, and bwrap through its pidfd
// (os.Process), so that a pid the kernel reused after bwrap was reaped is
// never signalled.
func (c *Confinement) killLocked() {
	c.killed = true
	c.cgroup.kill()
	if c.bwrap != nil {
		_ = c.bwrap.Signal(syscall.SIGKILL)
	}
}

// descendants lists the processes below pid (bounded).
func descendants(pid int) []int {
	var out []int
	queue := []int{pid}
	for len(queue) > 0 && len(out) < 4096 {
		p := queue[0]
		queue = queue[1:]
		tasks, _ := os.ReadDir("/proc/" + strconv.Itoa(p) + "/task")
		for _, t := range tasks {
			data, _ := os.ReadFile("/proc/" + strconv.Itoa(p) + "/task/" + t.Name() + "/children")
			for _, f := range strings.Fields(string(data)) {
				if n, err := strconv.Atoi(f); err == nil {
					out = append(out, n)
					queue = append(queue, n)
				}
			}
		}
	}
	return out
}

// Finish runs once the command and every process of its sandbox have
// ended: protected entries the command created in a writable root are
// moved to its quarantine directory (so that no host tool loads them),
// with what the next scan could not cover, modes the command widened are
// restored, and the cgroup is removed. id names the moved entries.
func (c *Confinement) Finish(id string) Report {
	var r Report
	if c == nil {
		return r
	}
	r.Limits = "rlimit"
	if cg := c.takeCgroup(); cg != nil {
		r.Limits = cg.describe()
		cg.remove()
	}
	for _, root := range c.roots {
		res := root.check(c.writable, id, c.since, c.budget)
		r.Quarantined = append(r.Quarantined, res.quarantined...)
		r.Aside = append(r.Aside, res.aside...)
		r.Restored = append(r.Restored, res.restored...)
		for _, err := range unjoin(res.err) {
			r.Unchecked = append(r.Unchecked, err.Error())
		}
	}
	return r
}

// unjoin splits errors.Join's result into its errors.
func unjoin(err error) []error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, unjoin(e)...)
		}
		return out
	}
	return []error{err}
}

// checked is what the check after a command did to one root.
type checked struct {
	quarantined, aside, restored []string
	err                          error // what could not be checked or moved aside
}

// check scans the root after the command and moves to its quarantine
// directory the protected entries that are new since the scan before it
// (compared by identity, not by path: a protected entry the command moved
// along with its parent is still the owner's) and that the rule may not
// write, and the directories the next scan could not cover. Directories
// the command made unreadable are made readable again and scanned, modes
// it widened restored. The moves have a deadline of their own; what is
// left unmoved is recorded (recordUnmoved).
func (r *writableRoot) check(writable []string, id string, since time.Time, budget ScanBudget) checked {
	s := newScanner(r.dir, r.path, writable, budget)
	s.post, s.since, s.groupWrite = true, since, groupWritable()
	s.known = map[[2]uint64]bool{}
	for _, e := range r.found {
		if e.kind == kindGitDir && !e.link {
			s.known[[2]uint64{e.dev, e.ino}] = true
		}
	}
	if err := s.run(); err != nil {
		return checked{err: fmt.Errorf("scan %s after the command: %w", r.path, err)}
	}
	res := checked{err: s.errs}
	// A scan that took its whole budget still moves what it found.
	m := &mover{r: r, id: id, deadline: time.Now().Add(budget.WithDefaults().Time), moved: map[string]bool{}}
	done, err := m.moveAll(r.fresh(s.out, writable), "protected")
	res.quarantined, res.err = done, errors.Join(res.err, err)
	aside := make([]protected, len(s.aside))
	for i, rel := range s.aside {
		aside[i] = protected{rel: rel}
	}
	res.aside, err = m.moveAll(aside, "beyond the scan")
	res.restored = append(s.fixed, m.restored...)
	res.err = errors.Join(res.err, err, m.record(), m.recordUnmoved())
	return res
}

// fresh returns the protected entries out holds that the scan before the
// command did not find and the rule may not write. A bare repository (a
// git directory by any name but .git, outside modules/ and worktrees/)
// is fresh whatever the rule may write: Writable ".git" keeps the
// repositories a command makes under that name, never a work tree
// dressed as one. So is a symbolic link the command put at a name the
// rule may write: a protected file the rule may write is no mount point
// (git and editors replace it by rename), so a command could swap a link
// in, which the host's tools would follow.
func (r *writableRoot) fresh(out []protected, writable []string) []protected {
	// An entry was there before when it is the same file: one bound
	// read-only stays alive (and keeps its inode number) whatever the
	// command does; one the rule lets the command write must also be at
	// the same name, in case it was removed (from outside the sandbox,
	// where it is no mount point) and its inode number given to a file
	// made at another protected name.
	type at struct {
		rel      string
		dev, ino uint64
	}
	before := map[at]bool{}
	for _, e := range r.found {
		if e.writable {
			before[at{e.rel, e.dev, e.ino}] = true
		} else {
			before[at{"", e.dev, e.ino}] = true
		}
	}
	var fresh []protected
	for _, e := range out {
		if before[at{"", e.dev, e.ino}] || before[at{e.rel, e.dev, e.ino}] || slices.Contains(writable, e.optName()) && !e.bare() && !e.link {
			continue
		}
		fresh = append(fresh, e)
	}
	return fresh
}
