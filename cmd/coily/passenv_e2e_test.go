package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"coily.dev/coily/internal/testserver"
)

// pass_env: a shim (a link to coily-exec, a script shim) and coily exec
// forward the variables the rule lists in pass_env from the agent's own
// environment, and nothing else: `git commit` through a shim lands the
// agent's author, a variable no rule lists reaches neither the command
// nor the audit log, and --env wins over the agent's value.
func TestCLIShimPassEnv(t *testing.T) {
	requireBwrap(t)
	fast := buildCoilyExec(t)
	dir := shortDir(t)
	ws := filepath.Join(shortDir(t), "ws")
	gitOut(t, "init", "-q", "-b", "main", ws)
	testserver.SandboxWorkspace(t, ws)
	p := startServe(t, dir, writePolicy(t, dir, fmt.Sprintf(`version: 1
workspaces: {repo: %s}
roles: {operator: {permissions: [exec], commands: [git, env]}}
commands:
  - name: git
    binary: /usr/bin/git
    args: ["**"]
    flags: any
    workspace: repo
    writable: [.git]
    pass_env: [GIT_AUTHOR_NAME, GIT_AUTHOR_EMAIL, GIT_COMMITTER_NAME, GIT_COMMITTER_EMAIL]
  - name: env
    binary: /usr/bin/env
    env: [DEMO_EXPLICIT]
    pass_env: [DEMO_NAME]
`, ws)))
	scripts, links := filepath.Join(shortDir(t), "scripts"), filepath.Join(shortDir(t), "links")
	if r := p.run(t, "shim", "install", "--script", "--dir", scripts, "git", "env"); r.code != 0 {
		t.Fatalf("shim install --script: %+v", r)
	}
	if err := os.Mkdir(links, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"git", "env"} {
		if err := os.Symlink(fast, filepath.Join(links, n)); err != nil {
			t.Fatal(err)
		}
	}
	agentEnv := []string{"COILY_SOCKET=" + p.socket, "HOME=" + t.TempDir(), "XDG_CACHE_HOME=" + t.TempDir(),
		"GIT_AUTHOR_NAME=Agent Ann", "GIT_AUTHOR_EMAIL=ann@example.com", "GIT_COMMITTER_NAME=Agent Ann",
		"GIT_COMMITTER_EMAIL=ann@example.com", "DEMO_NAME=from-the-agent", "DEMO_SECRET=never-sent-4711"}
	for i, shims := range []string{links, scripts} {
		env := append([]string{"PATH=" + shims + ":/usr/bin:/bin"}, agentEnv...)
		r := runWith(t, env, nil, "/bin/sh", "-c", fmt.Sprintf("git commit -q --allow-empty -m c%d && env", i))
		if r.code != 0 {
			t.Fatalf("%s: exit %d\n%s\n%s", shims, r.code, r.stderr, p.log)
		}
		if !strings.Contains(r.stdout, "DEMO_NAME=from-the-agent") || strings.Contains(r.stdout, "DEMO_SECRET") {
			t.Errorf("%s: the command's environment: %s", shims, r.stdout)
		}
		if got := gitOut(t, "-c", "safe.directory=*", "-C", ws, "log", "-1", "--format=%an <%ae> %cn"); strings.TrimSpace(got) != "Agent Ann <ann@example.com> Agent Ann" {
			t.Errorf("%s: the commit is by %q", shims, got)
		}
	}
	env := append([]string{"PATH=/usr/bin:/bin", "DEMO_EXPLICIT=x"}, agentEnv...)
	r := runWith(t, env, nil, coilyBin, "exec", "--env", "DEMO_NAME=given", "--env", "DEMO_EXPLICIT", "--", "env")
	if r.code != 0 || !strings.Contains(r.stdout, "DEMO_NAME=given\n") || !strings.Contains(r.stdout, "DEMO_EXPLICIT=x\n") || strings.Contains(r.stdout, "DEMO_SECRET") {
		t.Fatalf("coily exec --env: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	audit := readAudit(t, dir)
	if strings.Contains(audit, "DEMO_SECRET") || strings.Contains(audit, "never-sent-4711") {
		t.Fatal("a variable no rule lists reached the audit log")
	}
	if !strings.Contains(audit, `"env":["DEMO_NAME"]`) || !strings.Contains(audit, `"env":["GIT_AUTHOR_EMAIL","GIT_AUTHOR_NAME","GIT_COMMITTER_EMAIL","GIT_COMMITTER_NAME"]`) {
		t.Fatalf("the audit log does not name the forwarded variables:\n%s", audit)
	}
}
