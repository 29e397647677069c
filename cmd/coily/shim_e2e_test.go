package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"coily.dev/coily/audit"
	"coily.dev/coily/internal/testserver"
)

// The agent's everyday path: with the shim directory first on PATH, an
// agent types `gh --version` and `git status` as it would anywhere; they
// run on the trust point, in the sandbox, by the rules' binaries (the
// first of each rule's candidates present here), with exit codes and
// stdin passed through, and the audit shows the bare names as typed.
func TestCLIShimAgentPath(t *testing.T) {
	requireBwrap(t)
	_, err := exec.LookPath("gh")
	requireComponent(t, err == nil, "gh")
	dir := shortDir(t)
	ws := filepath.Join(shortDir(t), "ws")
	gitOut(t, "init", "-q", "-b", "main", ws)
	if err := os.WriteFile(filepath.Join(ws, "README"), []byte("hello\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	gitOut(t, "-C", ws, "add", "README")
	gitOut(t, "-C", ws, "commit", "-qm", "first")
	if err := os.WriteFile(filepath.Join(ws, "new.txt"), []byte("x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	testserver.SandboxWorkspace(t, ws)
	p := startServe(t, dir, writePolicy(t, dir, fmt.Sprintf(`version: 1
workspaces: {repo: %s}
roles: {operator: {permissions: [exec], commands: [gh-version, git-status, cat-stdin]}}
commands:
  - name: gh-version
    binary: [/opt/homebrew/bin/gh, /usr/local/bin/gh, /usr/bin/gh]
    flags: {--version: true}
  - name: git-status
    binary: [/opt/homebrew/bin/git, /usr/bin/git]
    args: [status]
    flags: any
    workspace: repo
  - name: cat-stdin
    binary: /bin/cat
`, ws)))

	shims := filepath.Join(shortDir(t), "shims")
	if r := p.run(t, "shim", "install", "--dir", shims); r.code != 0 || !strings.Contains(r.stdout, "export PATH=") {
		t.Fatalf("shim install: %+v", r)
	}
	r := p.run(t, "shim", "list", "--dir", shims)
	if r.code != 0 || !strings.Contains(r.stdout, "cat          ") || !strings.Contains(r.stdout, "gh           ") || !strings.Contains(r.stdout, "git          ") {
		t.Fatalf("shim list: %+v", r)
	}

	env := []string{"PATH=" + shims + ":/usr/bin:/bin", "COILY_SOCKET=" + p.socket, "HOME=" + t.TempDir()}
	agent := func(stdin, script string) (int, string, string) {
		t.Helper()
		r := runWith(t, env, []byte(stdin), "/bin/sh", "-c", script)
		return r.code, r.stdout, r.stderr
	}

	code, out, errOut := agent("", "gh --version && git status --short --branch")
	if code != 0 || !strings.Contains(out, "gh version") || !strings.Contains(out, "## main") || !strings.Contains(out, "?? new.txt") {
		t.Fatalf("gh --version && git status through the shims: exit %d\nstdout %s\nstderr %s\n%s", code, out, errOut, p.log)
	}
	if code, _, errOut := agent("", "git status --no-such-option"); code != 129 {
		t.Errorf("git's own exit code did not pass through: %d %q", code, errOut)
	}
	if code, _, errOut := agent("", "gh auth status"); code != 125 || !strings.Contains(errOut, "coily: refused (policy-deny)") {
		t.Errorf("a refused command: %d %q", code, errOut)
	}
	if code, out, _ := agent("piped in\n", "cat"); code != 0 || out != "piped in\n" {
		t.Errorf("stdin did not pass through the shim: %d %q", code, out)
	}

	recs, err := audit.Tail(filepath.Join(dir, "audit"), 100)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, rec := range recs {
		if rec.Event == "exec.result" && len(rec.Argv) > 0 {
			seen[rec.Argv[0]+" "+rec.Rule] = true
		}
	}
	for _, want := range []string{"gh gh-version", "git git-status", "cat cat-stdin"} {
		if !seen[want] {
			t.Errorf("no exec.result with argv[0] and rule %q in the audit: %v", want, seen)
		}
	}
	if r := p.run(t, "shim", "remove", "--dir", shims); r.code != 0 {
		t.Fatalf("shim remove: %+v", r)
	}
	if left, _ := os.ReadDir(shims); len(left) != 0 {
		t.Errorf("shims left after remove: %v", left)
	}
}
