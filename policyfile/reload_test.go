package policyfile

import (
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A FIFO where the policy was is refused, not read: reading it would
// block the reloader until a writer came, and every later reload with it.
func TestReadStableRefusesFIFO(t *testing.T) {
	path := filepath.Join(t.TempDir(), "policy.yaml")
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := readStable(path, 0, time.Now())
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "not a regular file") {
			t.Fatalf("readStable of a FIFO = %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("readStable of a FIFO blocked")
	}
}
