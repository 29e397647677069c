package standin

import (
	"os"
	"os/exec"
	"testing"
)

// Need returns the path of the program name, or skips t when it is not
// installed (fails it under CI=true, where every component must be).
// hint says how to install it.
func Need(t testing.TB, name, hint string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err == nil {
		return p
	}
	Missing(t, name+" not found: "+hint)
	return ""
}

// Missing skips t because a component is missing, or fails it under
// CI=true.
func Missing(t testing.TB, msg string) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}
