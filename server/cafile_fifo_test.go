package server

import (
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"coily.dev/coily/policy"
)

// A FIFO in place of a rule's ca_file (in a workspace, by a command) is
// refused at once: the exec is never left waiting for a writer.
func TestCAFileFIFONeverBlocks(t *testing.T) {
	dir := t.TempDir()
	ca := filepath.Join(dir, "ca.pem")
	if err := syscall.Mkfifo(ca, 0o644); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		f, err := copyCAFile(&policy.Rule{Name: "r", CAFile: ca}, dir)
		if f != nil {
			f.Close()
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "regular") {
			t.Fatalf("copyCAFile(FIFO) = %v, want a refusal of what is not a regular file", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("copyCAFile blocked on a FIFO")
	}
}
