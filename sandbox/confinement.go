package sandbox

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
)

// Confinement is what a backend keeps for one wrapped command: files the
// child inherits (closed in the parent once the child started), and a way
// to tell, after the command ended, whether the sandbox ever started it.
// A nil *Confinement is valid and does nothing (native).
type Confinement struct {
	childFiles []*os.File // the child's ends: closed in the parent after Start
	status     *os.File   // bwrap's --json-status-fd, read end
}

// AfterStart closes the parent's copies of the child's files. Call it once
// cmd.Start has returned (successfully or not).
func (c *Confinement) AfterStart() {
	if c == nil {
		return
	}
	for _, f := range c.childFiles {
		f.Close()
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
	data, _ := io.ReadAll(io.LimitReader(c.status, 64<<10))
	dec := json.NewDecoder(bytes.NewReader(data))
	for {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			break
		}
		// "child-pid" comes before the mounts are set up; only an
		// "exit-code" shows that the command itself ran (and exited).
		if _, ok := m["exit-code"]; ok {
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
	if c.status != nil {
		c.status.Close()
		c.status = nil
	}
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
	switch s := string(stderr); {
	case bytes.Contains(stderr, []byte("namespace")) || bytes.Contains(stderr, []byte("uid map")):
		return " (user namespaces are refused: check sysctl kernel.unprivileged_userns_clone=1 and, on Ubuntu, kernel.apparmor_restrict_unprivileged_userns=0 or an AppArmor profile for bwrap; `coily sandbox check` tells more)"
	case bytes.Contains(stderr, []byte("seccomp")) || bytes.Contains(stderr, []byte("PR_SET_SECCOMP")):
		return " (the kernel refused the seccomp filter: it needs CONFIG_SECCOMP_FILTER)"
	case len(s) == 0:
		return ""
	}
	return " (`coily sandbox check` tells what works on this host)"
}
