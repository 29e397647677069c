package policy_test

import (
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"coily.dev/coily/policy"
)

// TestLoadRefusesWhatIsNotAFile: the policy's path leading to a FIFO (no
// writer ever comes), a device or a directory is refused at once, naming
// what it found; Load used to wait for a FIFO's writer forever.
func TestLoadRefusesWhatIsNotAFile(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "policy.yaml")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ path, says string }{
		{fifo, "not a regular file (a FIFO)"},
		{"/dev/zero", "not a regular file (a device)"},
		{dir, "not a regular file (a directory)"},
	} {
		done := make(chan error, 1)
		go func() { _, err := policy.Load(tc.path); done <- err }()
		select {
		case err := <-done:
			if err == nil || !strings.Contains(err.Error(), tc.says) || !strings.HasPrefix(err.Error(), tc.path+": ") {
				t.Errorf("Load(%s) = %v, want %q", tc.path, err, tc.says)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("Load(%s) still blocked after 10 s", tc.path)
		}
	}
}
