package sandbox

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sync"
	"time"
)

// Confinement is what a backend keeps for one wrapped command: files the
// child inherits (closed in the parent once the child started), the start
// gate, the sandbox's processes and limits, and what its writable roots
// held before the command ran. A nil *Confinement is valid and does
// nothing (native).
//
// The caller's sequence: cmd.Start, AfterStart, Start (the sandbox waits
// for it before running the command), then, once the command ended,
// Setup (did the sandbox run it?) and Finish (what it left behind), and
// Close. Signal reaches every process of the sandbox at any time.
type Confinement struct {
	childFiles []*os.File // the child's ends: closed in the parent after Start
	status     *os.File   // bwrap's --json-status-fd, read end
	statusDec  *json.Decoder
	release    *os.File // the start gate's write end
	sawExit    bool     // an "exit-code" was read from the status

	limits   Limits
	user     *User // who the sandbox runs as on the host; nil: the caller's user
	writable []string
	roots    []*writableRoot
	budget   ScanBudget // of the roots' scans
	since    time.Time  // the scan before the command began (a second early: file times use a coarse clock)
	cgroup   *execCgroup

	fleet *Fleet // holds it from Wrap to Close
	// dynamic is the command's own uid, if it has one; detach undoes the
	// idmapped mounts of its roots (Close).
	dynamic *Dynamic
	// ownProc: bwrap was started by unshare(1), with a /proc of its own
	// (ownproc_linux.go): the process started is unshare, bwrap its child.
	ownProc bool
	detach  []func()

	mu      sync.Mutex  // guards cgroup and the four below, shared with Signal
	bwrap   *os.Process // bwrap, the outer namespace's init (signalled by pidfd)
	initPid int         // the sandbox's own init (host pid), once started
	started bool        // the start gate is open: the command may run
	killed  bool        // SIGKILLed: the gate never opens
}

// Running reports whether the command may have started: the sandbox's
// start gate is open (always, for a backend without one). Before that,
// stopping it needs no grace: SIGKILL.
func (c *Confinement) Running() bool {
	if c == nil || c.status == nil {
		return true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.started
}

// Report is what a confinement observed about one command. Paths are
// relative to their workspace.
type Report struct {
	// Quarantined are protected entries the command created, moved to
	// the workspace's QuarantineDir.
	Quarantined []string
	// Aside are directories the next scan could not cover (deeper than
	// ScanMaxDepth, or made by the command past the scan's entries),
	// moved to the QuarantineDir too.
	Aside []string
	// Restored are entries whose modes were restored: directories the
	// command had made unreadable (made readable again to be checked),
	// and entries it made writable by others (or by the group, where the
	// server's umask withholds it), sticky, setuid or setgid.
	Restored []string
	// Unchecked says, one line each, what could not be checked or moved
	// aside: the workspace may hold something planted, and the server
	// refuses it until its owner has looked.
	Unchecked []string
	// Limits says how the command was bounded: "rlimit" (per process:
	// memory and processes of one process, not of the whole command), or
	// "cgroup(memory,pids,kill)+rlimit" and its partial forms, naming what
	// the command's cgroup bounded as a whole.
	Limits string
}

// AfterStart closes the parent's copies of the child's files. Call it once
// cmd.Start has returned (successfully or not).
func (c *Confinement) AfterStart() {
	if c == nil {
		return
	}
	for _, f := range c.childFiles {
		if f != nil {
			f.Close()
		}
	}
	c.childFiles = nil
}

// Setup reports, once the command has exited, whether the sandbox ran it.
// A failure to set the sandbox up (as opposed to the command failing)
// returns an error wrapping ErrUnavailable; stderr, the command's error
// output, is used only to say why. Call it only for a run that ended on
// its own: a sandbox killed from outside never reports an exit.
func (c *Confinement) Setup(stderr []byte) error {
	if c == nil || c.status == nil {
		return nil
	}
	if c.sawExit {
		return nil
	}
	if c.statusDec == nil {
		c.statusDec = json.NewDecoder(io.LimitReader(c.status, 64<<10))
	}
	for {
		var m map[string]any
		if err := c.statusDec.Decode(&m); err != nil {
			break
		}
		// "child-pid" comes before the mounts are set up; only an
		// "exit-code" shows that the command itself ran (and exited).
		if _, ok := m["exit-code"]; ok {
			c.sawExit = true
			return nil
		}
	}
	return fmt.Errorf("%w: bwrap could not set up the sandbox: %s%s", ErrUnavailable, firstLine(stderr), hint(stderr))
}

// Close releases everything the confinement holds.
func (c *Confinement) Close() {
	if c == nil {
		return
	}
	c.AfterStart()
	c.fleet.remove(c)
	for _, f := range []**os.File{&c.status, &c.release} {
		if *f != nil {
			(*f).Close()
			*f = nil
		}
	}
	for _, r := range c.roots {
		r.close()
	}
	c.roots = nil
	for _, d := range c.detach {
		d()
	}
	c.detach = nil
	c.takeCgroup().remove()
}

// takeCgroup returns the command's cgroup, if any, and forgets it, under
// the lock a lockout's Kill reads it with.
func (c *Confinement) takeCgroup() *execCgroup {
	c.mu.Lock()
	defer c.mu.Unlock()
	cg := c.cgroup
	c.cgroup = nil
	return cg
}

func firstLine(b []byte) string {
	if i := bytes.IndexByte(b, '\n'); i >= 0 {
		b = b[:i]
	}
	if len(b) > 300 {
		b = b[:300]
	}
	if len(b) == 0 {
		return "(no message)"
	}
	return string(b)
}

// hint suggests a fix for the setup failures seen in practice.
func hint(stderr []byte) string {
	if r := containerRuntime(); r != "" {
		if f := ContainerFlag(r, string(stderr)); f != "" {
			return fmt.Sprintf(" (in a %s container: run it with %s; docs/operations.md, In a container)", r, f)
		}
	}
	switch s := string(stderr); {
	case bytes.Contains(stderr, []byte("namespace")) || bytes.Contains(stderr, []byte("uid map")):
		return " (user namespaces are refused: " + UsernsHint + "; `coily sandbox check` tells more)"
	case bytes.Contains(stderr, []byte("/proc/self/fd/")) && bytes.Contains(stderr, []byte("Permission denied")):
		return " (bubblewrap could not reach a file coily opened for the sandbox — an entry of the workspace, say: " +
			"it runs as the sandbox's user, and for a server running as root that is an unprivileged user, " +
			"who must be able to search every directory above what is bound)"
	case bytes.Contains(stderr, []byte("/proc/self/fd/")):
		return " (a file coily opened for the sandbox — the program, or the workspace or one of its protected entries — was replaced before the sandbox started; retry)"
	case bytes.Contains(stderr, []byte("seccomp")) || bytes.Contains(stderr, []byte("PR_SET_SECCOMP")):
		return " (the kernel refused the seccomp filter: it needs CONFIG_SECCOMP_FILTER)"
	case len(s) == 0:
		return ""
	}
	return " (`coily sandbox check` tells what works on this host)"
}

// UsernsHint says how to allow unprivileged user namespaces where a
// distribution restricts them.
const UsernsHint = "on Debian, sysctl -w kernel.unprivileged_userns_clone=1; on Ubuntu 23.10 and later, " +
	"the AppArmor profile granting coily `userns` (deploy/apparmor/coily) or sysctl -w kernel.apparmor_restrict_unprivileged_userns=0; " +
	"everywhere, user.max_user_namespaces must be above 0"
