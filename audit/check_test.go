package audit

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"coily.dev/coily/internal/diskfault"
)

// Check passes on a writable log, fails once the directory cannot take a
// record (a full disk as root, a read-only directory otherwise) and
// passes again once it can; it leaves no probe file behind; a closed log
// fails it.
func TestCheck(t *testing.T) {
	disk := diskfault.New(t, "1m")
	dir := filepath.Join(disk.Dir, "audit")
	l, err := Open(Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Append(context.Background(), sampleRecord(1)); err != nil {
		t.Fatal(err)
	}
	if err := l.Check(); err != nil {
		t.Fatalf("Check of a writable log: %v", err)
	}
	disk.Fail(t, dir)
	if err := l.Check(); !errors.Is(err, ErrBroken) {
		t.Fatalf("Check with no room = %v, want ErrBroken", err)
	}
	disk.Heal(t, dir)
	if err := l.Check(); err != nil {
		t.Fatalf("Check after healing: %v", err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) != 2 || entries[1].Name() != TreeFile {
		t.Fatalf("audit dir holds %v (%v), want only the log file and the tree's", entries, err)
	}
	if _, err := l.Append(context.Background(), sampleRecord(2)); err != nil {
		t.Fatal(err)
	}
	mustVerify(t, dir)
	l.Close()
	if err := l.Check(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Check of a closed log = %v, want ErrClosed", err)
	}
}
