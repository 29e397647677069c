package audit

import (
	"context"
	"path/filepath"
	"testing"
	"time"
)

// Pending lines chain like durable ones, are in the file at once, and are
// flushed by the next Append, a month rollover and Close.
func TestAppendPending(t *testing.T) {
	dir := t.TempDir()
	c := newClock(time.Date(2026, 10, 31, 23, 59, 0, 0, time.UTC))
	l := openLog(t, dir, c)
	ctx := context.Background()

	p1, err := l.AppendPending(ctx, sampleRecord(1))
	if err != nil {
		t.Fatal(err)
	}
	if !l.pending {
		t.Fatal("AppendPending did not leave the line pending")
	}
	// Written (readable by another reader) before any fsync.
	if rec, err := Find(dir, p1.ID); err != nil || rec.Hash != p1.Hash {
		t.Fatalf("pending line not in the file: %v", err)
	}
	if _, err := l.Append(ctx, sampleRecord(2)); err != nil {
		t.Fatal(err)
	}
	if l.pending {
		t.Fatal("Append did not flush the pending line")
	}

	// A pending line in October, then a record in November: the rollover
	// flushes October's file before it is closed.
	if _, err := l.AppendPending(ctx, sampleRecord(3)); err != nil {
		t.Fatal(err)
	}
	c.Set(time.Date(2026, 11, 1, 0, 0, 1, 0, time.UTC))
	if _, err := l.AppendPending(ctx, sampleRecord(4)); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	rep := mustVerify(t, dir)
	if rep.Lines != 4 || rep.Files != 2 {
		t.Fatalf("report %+v, want 4 lines in 2 files", rep)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*.jsonl"))
	if len(files) != 2 {
		t.Fatalf("files %v", files)
	}
}
