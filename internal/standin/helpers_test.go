package standin

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// run runs name with args in dir with a minimal environment (PATH, a
// fresh HOME, TMPDIR) plus env, and returns its combined output; it fails
// t if the command fails. The machine's own variables (PIP_FIND_LINKS,
// REQUESTS_CA_BUNDLE, …) would otherwise leak into the clients.
func run(t *testing.T, dir string, env []string, name string, args ...string) string {
	t.Helper()
	out, err := tryRun(t, dir, env, name, args...)
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return out
}

// tryRun is run that returns the error instead of failing t.
func tryRun(t *testing.T, dir string, env []string, name string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "TMPDIR=" + os.TempDir(), "LANG=C.UTF-8"}, env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// since logs how long a stand-in took to start.
func since(t *testing.T, what string, start time.Time) {
	t.Helper()
	t.Logf("%s started in %v", what, time.Since(start).Round(time.Millisecond))
}
