package audit

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// Large lines make small batches: no batch of more than one line holds
// more than batchBytes, and every line is still checked, in order.
func TestPipelineBatchesByBytes(t *testing.T) {
	dir := t.TempDir()
	line := bytes.Repeat([]byte("x"), 3<<20)
	var data []byte
	for range 10 {
		data = append(append(data, line...), '\n')
	}
	data = append(data, "short\n"...)
	if err := os.WriteFile(filepath.Join(dir, "2026-01.jsonl"), data, 0o600); err != nil {
		t.Fatal(err)
	}
	var batches, over int
	sentBatch = func(b *lineBatch) {
		batches++
		size := 0
		for _, l := range b.lines {
			size += len(l)
		}
		if len(b.lines) > 1 && size > batchBytes {
			over++
		}
	}
	defer func() { sentBatch = nil }()
	files, err := logFiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	next := 1
	err = verifyPipeline(dir, files, 0, func(_ string, n int, b []byte, _ bool, _ Record, _ string, _ error) error {
		if n != next {
			t.Fatalf("line %d checked where %d belongs", n, next)
		}
		next++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if next != 12 {
		t.Fatalf("%d lines checked, want 11", next-1)
	}
	if over > 0 || batches < 5 {
		t.Fatalf("%d batches, %d of them over %d bytes", batches, over, batchBytes)
	}
}
