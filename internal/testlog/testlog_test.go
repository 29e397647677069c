package testlog

import (
	"fmt"
	"slices"
	"sync"
	"testing"
)

func TestBufferConcurrentWriters(t *testing.T) {
	var b Buffer
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for range 100 {
				fmt.Fprintf(&b, "writer %d\n", i)
				_ = b.String()
			}
		})
	}
	wg.Wait()
	if n := len(b.Lines()); n != 800 {
		t.Fatalf("%d lines, want 800", n)
	}
	got := b.Bytes()
	got[0] = 'X'
	if b.String()[0] == 'X' {
		t.Fatal("Bytes shares the buffer's memory")
	}
}

func TestTailKeepsTheLastBytes(t *testing.T) {
	w := NewTail(8)
	for _, s := range []string{"first ", "second ", "third  "} {
		if n, err := w.Write([]byte(s)); n != len(s) || err != nil {
			t.Fatalf("Write(%q) = %d, %v", s, n, err)
		}
	}
	if got := w.String(); got != "third" {
		t.Fatalf("tail %q, want %q (the last 8 bytes, trimmed)", got, "third")
	}
}

func TestHeadKeepsTheFirstBytes(t *testing.T) {
	w := NewHead(8)
	for _, s := range []string{"first ", "second ", "third"} {
		if n, err := w.Write([]byte(s)); n != len(s) || err != nil {
			t.Fatalf("Write(%q) = %d, %v", s, n, err)
		}
	}
	if got := w.String(); got != "first se" {
		t.Fatalf("head %q, want %q", got, "first se")
	}
}

func TestLinesOfEmptyBuffer(t *testing.T) {
	var b Buffer
	if got := b.Lines(); !slices.Equal(got, []string{""}) {
		t.Fatalf("Lines of nothing: %q", got)
	}
}
