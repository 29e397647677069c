// Package ceiling runs one case of a test in a child process (the test
// binary again) under a real memory ceiling and a deadline, so that a test
// can show that hostile input is refused within a bound, and fails, rather
// than swapping or being killed, when it is not.
//
// The ceiling is RLIMIT_DATA, which covers the Go heap (private writable
// mappings) and not the address space the runtime only reserves: past it
// the runtime cannot grow the heap and the child dies "out of memory".
// Under the race detector, whose shadow memory counts too, it is 8 times
// higher.
//
// A test calls Child first; in the child it returns the case to run (and
// the ceiling is in force), and the test prints its answer with Report. In
// the parent, Run starts the child for a case and returns what it reported.
package ceiling

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

const (
	envCase  = "COILY_CEILING_CASE"
	envLimit = "COILY_CEILING_BYTES"
	marker   = "ceiling-report: "
)

// Child returns the case this process runs and true when it is a child
// started by Run, with its ceiling set; "" and false in the parent.
func Child(t *testing.T) (string, bool) {
	name := os.Getenv(envCase)
	if name == "" {
		return "", false
	}
	var limit uint64
	if _, err := fmt.Sscan(os.Getenv(envLimit), &limit); err != nil || limit == 0 {
		t.Fatalf("ceiling: bad %s", envLimit)
	}
	if err := syscall.Setrlimit(syscall.RLIMIT_DATA, &syscall.Rlimit{Cur: limit, Max: limit}); err != nil {
		t.Fatalf("ceiling: setrlimit: %v", err)
	}
	return name, true
}

// Report prints a child's answer for the parent (one line).
func Report(answer string) {
	fmt.Println(marker + strings.ReplaceAll(answer, "\n", `\n`))
}

// Run runs case name of the calling test in a child process with a heap
// ceiling of limit bytes, and returns what the child reported. It fails
// if the child did not report within d, or died (out of memory, most
// likely), naming how much time it took.
func Run(t *testing.T, name string, limit uint64, d time.Duration) (string, error) {
	t.Helper()
	limit *= raceFactor
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^"+t.Name()+"$", "-test.count=1", "-test.timeout="+(d+10*time.Second).String())
	cmd.Env = append(os.Environ(), envCase+"="+name, fmt.Sprintf("%s=%d", envLimit, limit))
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	start := time.Now()
	err := cmd.Run()
	took := time.Since(start)
	if ctx.Err() != nil {
		return "", fmt.Errorf("%s: no answer within %v", name, d)
	}
	sc := bufio.NewScanner(&out)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), marker); ok && err == nil {
			return rest, nil
		}
	}
	tail := firstLine(errOut.String(), "fatal error:", "runtime: out of memory", "panic:", "--- FAIL")
	if err == nil {
		err = errors.New("no report")
	}
	return "", fmt.Errorf("%s: child failed after %v under a %d MiB ceiling: %w: %s", name, took.Round(time.Millisecond), limit>>20, err, tail)
}

// firstLine returns the first line of out that starts one of the prefixes,
// or the last line of out.
func firstLine(out string, prefixes ...string) string {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	for _, l := range lines {
		for _, p := range prefixes {
			if strings.HasPrefix(l, p) {
				return l
			}
		}
	}
	return lines[len(lines)-1]
}
