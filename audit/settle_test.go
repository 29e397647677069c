package audit

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// Old month files archived out of the directory: a start whose hash file
// holds the last checkpoint's tree reads only the files after it; one
// that must rebuild the hash file from every line fails, naming the
// files' absence (ErrMissingFiles), not a corrupt log.
func TestSettleTreeWithoutArchivedMonths(t *testing.T) {
	dir := t.TempDir()
	c := newClock(oct)
	l := openLog(t, dir, c)
	appendN(t, l, 5)
	c.Set(oct.AddDate(0, 1, 0))
	appendN(t, l, 5)
	_, cp := signedHead(t, l)
	c.Set(oct.AddDate(0, 2, 0))
	appendN(t, l, 3)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	want := recomputed(t, dir)
	if err := os.Rename(filepath.Join(dir, "2026-10.jsonl"), filepath.Join(t.TempDir(), "2026-10.jsonl")); err != nil {
		t.Fatal(err)
	}

	l = openLog(t, dir, c)
	if err := l.SettleTree(&cp.Tree); err != nil {
		t.Fatalf("SettleTree from the checkpoint without the oldest month: %v", err)
	}
	if got, err := l.TreeHead(); err != nil || got != want {
		t.Fatalf("tree head %+v (%v), want %+v", got, err, want)
	}
	if err := l.SettleTree(nil); !errors.Is(err, ErrMissingFiles) {
		t.Fatalf("SettleTree with no checkpoint: %v, want ErrMissingFiles", err)
	}
	if _, err := l.TreeHead(); !errors.Is(err, ErrMissingFiles) {
		t.Fatalf("TreeHead after a failed SettleTree: %v", err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(Config{Dir: dir, Now: c.Now}); !errors.Is(err, ErrMissingFiles) {
		t.Fatalf("Open with a short hash file and no oldest month: %v", err)
	}
}

// A log copied off the host without its hash file verifies against a
// checkpoint from its lines alone (Consistent false), and still fails
// when cut back.
func TestVerifyCheckpointWithoutHashFile(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, dir, newClock(oct))
	appendN(t, l, 7)
	_, cp := signedHead(t, l)
	appendN(t, l, 2)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, TreeFile)); err != nil {
		t.Fatal(err)
	}
	rep, err := VerifyCheckpoint(dir, cp)
	if err != nil || rep.Consistent || rep.Tree != recomputed(t, dir) {
		t.Fatalf("VerifyCheckpoint without the hash file: %+v, %v", rep, err)
	}
	cp.N = 10
	var ce *CheckpointError
	if _, err := VerifyCheckpoint(dir, cp); !errors.As(err, &ce) {
		t.Fatalf("VerifyCheckpoint of a log shorter than the checkpoint: %v", err)
	}
}
