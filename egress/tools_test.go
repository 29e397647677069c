package egress

import (
	"context"
	"encoding/base64"
	"os"
	"os/exec"
	"testing"
)

// lookTool finds a tool the test runs; CI has every one, so a missing
// tool fails there and skips elsewhere.
func lookTool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s is not installed", name)
		}
		t.Skipf("%s is not installed", name)
	}
	return p
}

// execTool runs a tool with exactly env (nil: just PATH) and returns its
// combined output.
func execTool(ctx context.Context, path string, env []string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, path, args...)
	if env == nil {
		env = []string{"PATH=" + os.Getenv("PATH")}
	}
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func base64Std(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
