package server_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"coily.dev/coily/internal/testserver"
	"coily.dev/coily/refusal"
	"coily.dev/coily/sandbox"
)

// The check after a command, after an attacker's review of issue 22's:
// nothing hides from it under a directory dressed as a repository, it
// keeps to its budget whatever the workspace holds, and what it must move
// aside moves even where the command took write access away.

// gone fails the test for each path still in the workspace.
func gone(t *testing.T, c *containment, paths ...string) {
	t.Helper()
	for _, p := range paths {
		if _, err := os.Lstat(filepath.Join(c.ws, p)); err == nil {
			t.Errorf("%s was left in place (audit %v %v)", p, lastResult(t, c.in).Details, lastResult(t, c.in).Lists)
		}
	}
}

// A directory dressed as a bare repository (a HEAD and refs/) hides
// nothing under `writable: [.git]`: one the command made is quarantined
// whole, and what it plants in a bare repository the owner had (agent
// configuration, dotenv files, a virtual environment, editor tasks, a
// nested repository, directories writable by all) is checked like the
// rest of the workspace. Its git data is the rule's to write; the
// repositories the rule makes under the name .git are kept.
func TestContainmentBareRepositoryHidesNothing(t *testing.T) {
	c := startContainment(t, envGit)
	git(t, c.ws, "init", "-q", "--bare", "owner.git")
	testserver.SandboxWorkspace(t, c.ws)
	plants := []string{".envrc", ".claude/settings.json", ".mcp.json", ".env", ".venv/bin/python", ".vscode/tasks.json", "sub/.git/hooks/pre-commit"}
	script := `umask 000 && mkdir -p DIR/refs DIR/.claude DIR/.venv/bin DIR/.vscode DIR/sub/.git/hooks DIR/wide &&
echo ref: refs/heads/main > DIR/HEAD && echo x > DIR/.envrc && echo '{"hooks":{}}' > DIR/.claude/settings.json &&
echo x > DIR/.mcp.json && echo NODE_OPTIONS=x > DIR/.env && echo x > DIR/.venv/bin/python &&
echo x > DIR/.vscode/tasks.json && echo x > DIR/sub/.git/hooks/pre-commit && echo x > DIR/objects/kept`
	ran(t, "plant in a new bare repository", c.gitSh(t, "mkdir -p app/objects && "+strings.ReplaceAll(script, "DIR", "app")))
	gone(t, c, "app")
	ran(t, "plant in the owner's bare repository", c.gitSh(t, strings.ReplaceAll(script, "DIR", "owner.git")))
	for _, p := range plants {
		gone(t, c, "owner.git/"+p)
	}
	for _, kept := range []string{"owner.git/HEAD", "owner.git/objects/kept", "owner.git/refs"} {
		if _, err := os.Lstat(filepath.Join(c.ws, kept)); err != nil {
			t.Errorf("the owner's git data: %v", err)
		}
	}
	if fi, err := os.Lstat(filepath.Join(c.ws, "owner.git/wide")); err != nil || fi.Mode().Perm()&0o002 != 0 {
		t.Errorf("owner.git/wide: %v %v, want no write access for others", fi.Mode(), err)
	}
	ran(t, "a repository the rule makes", c.gitSh(t, "git init -q made && echo x > made/.git/objects/kept"))
	if _, err := os.Stat(filepath.Join(c.ws, "made/.git/objects/kept")); err != nil {
		t.Errorf("a rule that may write git data lost the repository it made: %v", err)
	}
	ran(t, "the next command", c.gitSh(t, "true"))
}

// Configuration in a workspace that names hundreds of paths, each taking
// the scan through /proc/self/root eighty times, never makes a scan blow
// its budget: in repositories a command made (their configuration is
// never read: the repositories are quarantined), nor in ones the owner
// has (read before the command: the command is refused, naming them,
// within the budget). The exec ends, nothing counts it as running, the
// server stops within its grace.
func TestContainmentScanConfigInBudget(t *testing.T) {
	c := startContainmentWith(t, "", testserver.Options{ScanBudget: sandbox.ScanBudget{Time: 2 * time.Second}})
	value := strings.Repeat("/proc/self/root", 80) + "/x"
	fake := `for r in b1 b2; do mkdir -p $r/objects $r/refs && echo ref: refs/heads/m > $r/HEAD && { echo '[include]'; i=0; while [ $i -lt 400 ]; do echo "path=` + value + `"; i=$((i+1)); done; } > $r/config; done`
	start := time.Now()
	ran(t, "plant", c.sh(t, fake))
	t.Logf("the exec took %s", time.Since(start).Round(time.Millisecond))
	if n := running(t, c.in); n != 0 {
		t.Fatalf("status: %d running after the command ended", n)
	}
	gone(t, c, "b1", "b2")
	ran(t, "the next command", c.sh(t, "true"))

	// The same, made by the owner: refused before the command runs.
	if out, err := execOwner(c.ws, "sh", "-c", fake); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	testserver.SandboxWorkspace(t, c.ws)
	start = time.Now()
	r := c.sh(t, "echo ran > ran.txt")
	if took := time.Since(start); took > 15*time.Second {
		t.Errorf("the refusal took %s", took)
	}
	wantCode(t, r.err, refusal.SandboxUnavailable)
	if _, err := os.Stat(filepath.Join(c.ws, "ran.txt")); err == nil {
		t.Fatal("the command ran")
	}
	if n := running(t, c.in); n != 0 {
		t.Fatalf("status: %d running", n)
	}
	stopWithin(t, c, 10*time.Second)
}

// execOwner runs a command in dir as the test's user.
func execOwner(dir string, argv ...string) ([]byte, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = dir
	return cmd.CombinedOutput()
}

// stopWithin fails the test unless the server stops within d.
func stopWithin(t *testing.T, c *containment, d time.Duration) {
	t.Helper()
	stopped := make(chan struct{})
	go func() { c.in.Stop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(d):
		t.Fatalf("the server did not stop within %s", d)
	}
}

// Submodule git directories nested deeper than the scan goes
// (.git/modules/a/a/a…) are moved aside after the command that made
// them, like any other tree too deep, so the next command runs.
func TestContainmentDeepModulesMovedAside(t *testing.T) {
	c := startContainment(t, envGit)
	ran(t, "plant", c.gitSh(t, "mkdir -p .git/modules/"+strings.Repeat("a/", 300)+" && echo x > .git/modules/"+strings.Repeat("a/", 300)+"f"))
	rec := lastResult(t, c.in)
	if len(rec.Lists["moved_aside"]) == 0 || len(rec.Lists["unchecked"]) != 0 {
		t.Errorf("moved aside %q, unchecked %q", rec.Lists["moved_aside"], rec.Lists["unchecked"])
	}
	ran(t, "the next command", c.gitSh(t, "true"))
}
