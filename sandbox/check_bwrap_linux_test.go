package sandbox

import (
	"errors"
	"testing"
)

// Bwrap.Check passes where bubblewrap works and names what is missing
// where it does not.
func TestBwrapCheck(t *testing.T) {
	if _, err := BwrapPath(); err != nil {
		t.Skip("bubblewrap not installed")
	}
	if err := (Bwrap{}).Check(); err != nil {
		t.Fatalf("Check where bubblewrap works: %v", err)
	}
	err := Bwrap{Path: "/nonexistent/bwrap"}.Check()
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Check of a missing bwrap = %v, want ErrUnavailable", err)
	}
	var _ Checker = Bwrap{}
	var _ Checker = SandboxExec{}
}
