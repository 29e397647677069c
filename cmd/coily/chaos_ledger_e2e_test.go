package main

import (
	"bytes"
	"coily.dev/coily/cli"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"coily.dev/coily/audit"
)

// chaosLedger keeps every request the chaos suite sent: each command
// appends its own marker to runlog when it runs, so the log shows which
// ran and how often, and the audit log (matched on the marker in argv)
// shows which were recorded.
type chaosLedger struct {
	t      *testing.T
	runlog string
	mu     sync.Mutex
	calls  []*chaosCall
}

func newChaosLedger(t *testing.T) *chaosLedger {
	return &chaosLedger{t: t, runlog: filepath.Join(shortDir(t), "runs.log")}
}

// chaosTransport is how a `coily exec` reaches the server: flags before
// the subcommand, environment.
type chaosTransport struct {
	name string
	args []string
	env  []string
}

// chaosCall is one `coily exec` process.
type chaosCall struct {
	marker         string
	cmd            *exec.Cmd
	stdout, stderr bytes.Buffer
	done           chan struct{}
	code           int
	answered       bool
	refusal        string // the refusal code, when refused
}

var chaosRefused = regexp.MustCompile(`^coily: refused \(([a-z-]+)\)`)

func newMarker() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return "C" + hex.EncodeToString(b)
}

// start runs `coily exec -- /bin/sh -c SCRIPT` through tr; SCRIPT sees its
// marker as $M, after the marker was appended to the run log.
func (l *chaosLedger) start(tr chaosTransport, script string) *chaosCall {
	return l.startArgv(tr, []string{"/bin/sh"}, script)
}

// startArgv is start with another shell's argv before -c (e.g. env sh).
func (l *chaosLedger) startArgv(tr chaosTransport, shell []string, script string) *chaosCall {
	c := &chaosCall{marker: newMarker(), done: make(chan struct{})}
	full := "M=" + c.marker + "; echo $M >> " + l.runlog + "; " + script
	args := append(append(append(append([]string{}, tr.args...), "exec", "--timeout", "60s", "--"), shell...), "-c", full)
	c.cmd = exec.Command(coilyBin, args...)
	c.cmd.Env = append(os.Environ(), tr.env...)
	c.cmd.Stdout, c.cmd.Stderr = &c.stdout, &c.stderr
	if err := c.cmd.Start(); err != nil {
		l.t.Fatal(err)
	}
	go func() {
		err := c.cmd.Wait()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			c.code = ee.ExitCode()
		} else if err != nil {
			c.code = -1
		}
		close(c.done)
	}()
	l.t.Cleanup(func() { _ = c.cmd.Process.Kill(); <-c.done })
	l.mu.Lock()
	l.calls = append(l.calls, c)
	l.mu.Unlock()
	return c
}

// wait gives the call until within to end with an answer: the command's
// exit, or a refusal that says why. It reports whether it did.
func (c *chaosCall) wait(within time.Duration) bool {
	select {
	case <-c.done:
	case <-time.After(within):
		_ = c.cmd.Process.Kill()
		<-c.done
		return false
	}
	switch m := chaosRefused.FindStringSubmatch(c.stderr.String()); {
	case c.code == cli.ExitRefused && m != nil:
		c.refusal, c.answered = m[1], true
	case c.code == cli.ExitUnreachable && strings.HasPrefix(c.stderr.String(), "coily: server unreachable: "):
		// The server was out of reach, or died mid-request: an answer
		// that says so (nothing to record, or its decision is the record).
		c.refusal, c.answered = "unreachable", true
	default:
		c.answered = c.code >= 0 && c.code != cli.ExitRefused && c.code != cli.ExitUnreachable
	}
	return c.answered
}

// run starts a call and waits for its answer.
func (l *chaosLedger) run(tr chaosTransport, script string) *chaosCall {
	c := l.start(tr, script)
	c.wait(90 * time.Second)
	return c
}

// runs counts how often each marker's command ran.
func (l *chaosLedger) runs() map[string]int {
	data, _ := os.ReadFile(l.runlog)
	n := map[string]int{}
	for _, line := range strings.Fields(string(data)) {
		n[line]++
	}
	return n
}

// waitRan waits until c's command runs.
func (l *chaosLedger) waitRan(c *chaosCall) {
	l.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for l.runs()[c.marker] == 0 {
		select {
		case <-c.done:
			l.t.Fatalf("the call ended before its command ran: %d %q", c.code, c.stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			l.t.Fatal("the command never started")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// probe runs a trivial command through tr until one succeeds, and returns
// the time since t0 (the fault) when it did.
func (l *chaosLedger) probe(tr chaosTransport, t0 time.Time) (time.Duration, error) {
	deadline := time.Now().Add(120 * time.Second)
	for {
		c := l.run(tr, "true")
		if c.code == 0 && c.answered {
			return time.Since(t0), nil
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("no exec succeeded through %s within 120 s (last: %d %q)", tr.name, c.code, c.stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// chaosCounts is what check found.
type chaosCounts struct {
	requests, lost, twice, unanswered int
	notes                             []string
}

var chaosMarkerInArgv = regexp.MustCompile(`M=(C[0-9a-f]{12});`)

// check compares the calls with the run log and the audit log of
// stateDir (read after the server stopped): every command that ran has
// its allow decision, every exit delivered its result record, every
// refusal the server gave its record; no command ran twice; every call was
// answered; the audit chain verifies.
func (l *chaosLedger) check(stateDir string) chaosCounts {
	l.t.Helper()
	var c chaosCounts
	recs, err := audit.Tail(filepath.Join(stateDir, "audit"), 1<<30)
	if err != nil {
		c.lost++
		c.notes = append(c.notes, "audit log unreadable: "+err.Error())
	}
	byMarker := map[string][]audit.Record{}
	for _, r := range recs {
		if m := chaosMarkerInArgv.FindStringSubmatch(strings.Join(r.Argv, " ")); m != nil {
			byMarker[m[1]] = append(byMarker[m[1]], r)
		}
	}
	runs := l.runs()
	for m, n := range runs {
		if n > 1 {
			c.twice++
			c.notes = append(c.notes, fmt.Sprintf("%s ran %d times", m, n))
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	c.requests = len(l.calls)
	for _, call := range l.calls {
		if !call.answered {
			c.unanswered++
			c.notes = append(c.notes, fmt.Sprintf("%s unanswered: exit %d, stderr %q", call.marker, call.code, call.stderr.String()))
		}
		if why := missingRecord(call, runs[call.marker] > 0, byMarker[call.marker]); why != "" {
			c.lost++
			c.notes = append(c.notes, call.marker+": "+why)
		}
	}
	if r := runCoily(l.t, nil, "audit", "verify", "--state-dir", stateDir); r.code != 0 {
		c.lost++
		c.notes = append(c.notes, "audit verify: "+strings.TrimSpace(r.stdout+r.stderr))
	}
	return c
}

// missingRecord says which record of call the audit log lacks, if any.
func missingRecord(call *chaosCall, ran bool, recs []audit.Record) string {
	has := func(match func(audit.Record) bool) bool {
		for _, r := range recs {
			if match(r) {
				return true
			}
		}
		return false
	}
	switch {
	case ran && !has(func(r audit.Record) bool { return r.Event == "exec.decision" && r.Decision == "allow" }):
		return "ran without an allow decision on record"
	case call.answered && call.refusal == "" && !has(func(r audit.Record) bool { return r.Event == "exec.result" }):
		return fmt.Sprintf("exit %d delivered without an exec.result record", call.code)
	case call.refusal != "" && call.refusal != "internal" && call.refusal != "unreachable" && !has(func(r audit.Record) bool { return r.Code == call.refusal }):
		// internal and unreachable cover a server out of reach (nothing
		// to record) and one that died mid-request (the decision above is
		// its record).
		return "refused " + call.refusal + " without a record"
	}
	return ""
}
