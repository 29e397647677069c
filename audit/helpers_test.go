package audit

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// clock is a fake Config.Now that advances one second per call.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock(t time.Time) *clock { return &clock{t: t} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(time.Second)
	return c.t
}

func (c *clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}

var oct = time.Date(2026, 10, 14, 12, 0, 0, 0, time.UTC)

func openLog(t testing.TB, dir string, c *clock) *Log {
	t.Helper()
	l, err := Open(Config{Dir: dir, Now: c.Now})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

func sampleRecord(i int) Record {
	code := i % 3
	return Record{
		Event:     "exec.decision",
		Method:    "/coily.v1.Coily/Exec",
		RequestID: fmt.Sprintf("req-%d", i%4),
		Principal: "agent",
		Transport: "local",
		Peer:      "uid=1000",
		Argv:      []string{"sh", "-c", "echo <a> && echo b > /tmp/x"},
		Decision:  "allow",
		ExitCode:  &code,
		Details:   map[string]string{"k": "v", "i": fmt.Sprint(i)},
	}
}

func appendN(t testing.TB, l *Log, n int) []Record {
	t.Helper()
	out := make([]Record, 0, n)
	for i := range n {
		r, err := l.Append(context.Background(), sampleRecord(i))
		if err != nil {
			t.Fatalf("Append %d: %v", i, err)
		}
		out = append(out, r)
	}
	return out
}

func mustVerify(t testing.TB, dir string) Report {
	t.Helper()
	rep, err := Verify(dir)
	if err != nil {
		t.Fatalf("Verify: %v", err)
	}
	return rep
}

// splitLines returns the '\n'-terminated lines of data (the terminators are
// dropped; a final unterminated fragment is kept).
func splitLines(data []byte) [][]byte {
	lines := bytes.SplitAfter(data, []byte("\n"))
	if len(lines[len(lines)-1]) == 0 {
		lines = lines[:len(lines)-1]
	}
	for i, l := range lines {
		lines[i] = bytes.TrimSuffix(l, []byte("\n"))
	}
	return lines
}

func joinLines(lines [][]byte) []byte {
	var b bytes.Buffer
	for _, l := range lines {
		b.Write(l)
		b.WriteByte('\n')
	}
	return b.Bytes()
}

func readFile(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func writeFile(t testing.TB, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// validLog builds a log of n records in a fresh directory and returns the
// directory and the path of its single month file.
func validLog(t testing.TB, n int) (dir, path string) {
	t.Helper()
	dir = t.TempDir()
	l := openLog(t, dir, newClock(oct))
	appendN(t, l, n)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return dir, filepath.Join(dir, "2026-10.jsonl")
}
