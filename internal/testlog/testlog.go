// Package testlog holds the writers tests give to what logs: a buffer
// that many goroutines (a server's, a child process's copier) write to
// while the test reads it, ones that keep only the tail or the head of a
// child's output for a failure message, and one that sends each write to
// the test's own log. Tests only.
package testlog

import (
	"bytes"
	"io"
	"strings"
	"sync"
	"testing"
)

// Buffer is a bytes.Buffer safe for concurrent writers; it may be read
// while they still write. The zero value is ready to use.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// String returns what was written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// Bytes returns a copy of what was written so far.
func (b *Buffer) Bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return bytes.Clone(b.b.Bytes())
}

// Lines returns what was written so far, trimmed of surrounding space,
// split into lines.
func (b *Buffer) Lines() []string {
	return strings.Split(strings.TrimSpace(b.String()), "\n")
}

// Tail keeps the last bytes written to it: a child's output, for the
// message of a test that fails because of it.
type Tail struct {
	mu  sync.Mutex
	max int
	b   []byte
}

// NewTail returns a Tail that keeps the last max bytes.
func NewTail(max int) *Tail { return &Tail{max: max} }

func (w *Tail) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.b = append(w.b, p...)
	if len(w.b) > w.max {
		w.b = w.b[len(w.b)-w.max:]
	}
	return len(p), nil
}

// String returns the tail kept, trimmed of surrounding space.
func (w *Tail) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return strings.TrimSpace(string(w.b))
}

// Head keeps the first bytes written to it: a child's output, for the
// message of a test that fails because of it, when the start says why.
type Head struct {
	mu  sync.Mutex
	max int
	b   bytes.Buffer
}

// NewHead returns a Head that keeps the first max bytes.
func NewHead(max int) *Head { return &Head{max: max} }

func (w *Head) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if n := w.max - w.b.Len(); n > 0 {
		w.b.Write(p[:min(n, len(p))])
	}
	return len(p), nil
}

// String returns the head kept.
func (w *Head) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// T returns a writer that sends each write to t's log as one entry,
// without its final newline (a logger's line, a server's error log).
func T(t testing.TB) io.Writer { return tWriter{t} }

type tWriter struct{ t testing.TB }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}
