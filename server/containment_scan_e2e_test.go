package server_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"coily.dev/coily/audit"
	"coily.dev/coily/internal/testserver"
	coilyv1 "coily.dev/coily/proto/coily/v1"
	"coily.dev/coily/refusal"
	"coily.dev/coily/sandbox"
	"coily.dev/coily/workspace"
)

// What a command leaves in its workspace must never stop the server, nor
// anyone else (issue 22, classes 2, 3 and 7): the scans before and after
// a command never block on what it made, what they move aside always
// fits, what they cannot cover refuses that workspace alone, the modes it
// set are taken back, and what the owner's tools load is quarantined.

// envGit runs `env sh -c …` in the workspace with git data writable; nice
// runs `nice sh -c …` there with a virtual environment writable.
const envGit = `  - {name: envgit, binary: /usr/bin/env, args: ["**"], flags: any, workspace: ws, writable: [.git]}
  - {name: venv, binary: /usr/bin/nice, args: ["**"], flags: any, workspace: ws, writable: [.venv]}
`

// gitSh runs script with git data writable.
func (c *containment) gitSh(t *testing.T, script string) result {
	t.Helper()
	return execArgv(t, c.in, "/usr/bin/env", "sh", "-c", script)
}

// ran fails the test unless the command ran and exited 0.
func ran(t *testing.T, what string, r result) {
	t.Helper()
	if r.err != nil || r.exit.GetExitCode() != 0 {
		t.Fatalf("%s: %v %+v", what, r.err, r)
	}
}

// running is the server's count of running commands.
func running(t *testing.T, in *testserver.Instance) int32 {
	t.Helper()
	st, err := in.Client.API.Status(context.Background(), &coilyv1.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	return st.GetRunning()
}

// A FIFO where a scan reads a file (a fake repository's config, or the
// config of a repository a rule that may write git data made) never
// blocks the server: the command ends, nothing counts it as running, a
// lockout finds nothing to kill, the next command's scan goes through,
// and the server stops within its grace (10 s).
func TestContainmentFIFONeverBlocks(t *testing.T) {
	c := startContainment(t, envGit)
	ran(t, "a fake repository of FIFOs", c.sh(t, "mkdir -p b2/objects b2/refs && mkfifo b2/HEAD b2/config"))
	ran(t, "a repository whose config is a FIFO", c.gitSh(t, "git init -q b3 && rm b3/.git/config && mkfifo b3/.git/config"))
	if n := running(t, c.in); n != 0 {
		t.Fatalf("status: %d running after every command ended", n)
	}
	resp, err := c.in.Client.API.Lockout(context.Background(), &coilyv1.LockoutRequest{Reason: "fifo"})
	if err != nil || resp.GetKilled() != 0 {
		t.Fatalf("lockout: killed %d (%v), want 0", resp.GetKilled(), err)
	}
	if _, err := c.in.Client.API.Unlock(context.Background(), &coilyv1.UnlockRequest{Reason: "fifo"}); err != nil {
		t.Fatal(err)
	}
	ran(t, "the next command", c.sh(t, "true"))
	ran(t, "the next command with git data writable", c.gitSh(t, "true"))
	for _, gone := range []string{"b2", "b3/.git/config"} {
		if _, err := os.Lstat(filepath.Join(c.ws, gone)); err == nil {
			t.Errorf("%s was left in place", gone)
		}
	}
	stopped := make(chan struct{})
	start := time.Now()
	go func() { c.in.Stop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("the server did not stop within its 10 s grace")
	}
	t.Logf("stopped in %s", time.Since(start).Round(time.Millisecond))
}

// quarantined reads the workspace's quarantine manifests: where each
// entry moved there was.
func quarantined(t *testing.T, ws string) map[string]string {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(ws, sandbox.QuarantineDir, "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		var m struct {
			Entries []struct{ Name, Path string }
		}
		if err := json.Unmarshal(data, &m); err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		for _, e := range m.Entries {
			out[e.Path] = e.Name
		}
	}
	return out
}

// A planted bare repository (with a hostile core.pager) under a name so
// long that no suffix fits (255 bytes is the most a name may have) is
// quarantined all the same: moved to the quarantine directory under a
// short name of the server's, its manifest naming where it was. Nothing
// locks out; the workspace and every other rule go on.
func TestContainmentQuarantineLongName(t *testing.T) {
	c := startContainment(t, "")
	for _, n := range []int{249, 255} {
		name := strings.Repeat("r", n)
		ran(t, "plant", c.sh(t, "git init -q --bare "+name+" && printf '[core]\\n\\tpager = touch pwned\\n' >> "+name+"/config"))
		if _, err := os.Lstat(filepath.Join(c.ws, name)); err == nil {
			t.Fatalf("the %d-byte repository is still where git finds it", n)
		}
		at, ok := quarantined(t, c.ws)[name]
		if !ok {
			t.Fatalf("no manifest names the %d-byte repository (audit %v)", n, lastResult(t, c.in).Details)
		}
		if _, err := os.Stat(filepath.Join(c.ws, sandbox.QuarantineDir, at, "config")); err != nil {
			t.Errorf("the quarantined repository: %v", err)
		}
	}
	st, err := c.in.Client.API.Status(context.Background(), &coilyv1.StatusRequest{})
	if err != nil || st.GetLockout().GetActive() {
		t.Fatalf("the server locked out: %v %v", st.GetLockout(), err)
	}
	ran(t, "the next command in the workspace", c.sh(t, "true"))
	if r := execArgv(t, c.in, "/bin/sleep", "0"); r.err != nil {
		t.Fatalf("a rule without the workspace: %v", r.err)
	}
	// The quarantine directory is the server's: hidden from every
	// command, which cannot read, fill, rename or remove it.
	r := c.sh(t, "ls -A "+sandbox.QuarantineDir+" | wc -l; touch "+sandbox.QuarantineDir+"/x; mv "+sandbox.QuarantineDir+" q; rm -rf "+sandbox.QuarantineDir+"; true")
	if r.err != nil || strings.TrimSpace(strings.SplitN(r.stdout, "\n", 2)[0]) != "0" {
		t.Fatalf("the quarantine directory in the sandbox: %+v", r)
	}
	if len(quarantined(t, c.ws)) != 2 {
		t.Fatal("a command changed the quarantine directory")
	}
	if fi, err := os.Stat(filepath.Join(c.ws, sandbox.QuarantineDir)); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("quarantine directory: %v %v, want 0700", fi.Mode(), err)
	}
}

// A tree deeper than the scan before a command covers (70 directories)
// is moved aside after the command that made it: the next command runs.
func TestContainmentDeepTreeMovedAside(t *testing.T) {
	c := startContainment(t, "")
	deep := "deep" + strings.Repeat("/d", 70)
	ran(t, "plant", c.sh(t, "mkdir -p "+deep+" && echo x > "+deep+"/f"))
	ran(t, "the next command", c.sh(t, "true"))
	if _, err := os.Lstat(filepath.Join(c.ws, "deep"+strings.Repeat("/d", sandbox.ScanMaxDepth-1))); err == nil {
		t.Error("the part past the bound is still in place")
	}
	if _, err := os.Stat(filepath.Join(c.ws, "deep/d/d")); err != nil {
		t.Errorf("the part within the bound was moved too: %v", err)
	}
	moved := false
	for p := range quarantined(t, c.ws) {
		moved = moved || strings.HasPrefix(p, "deep/")
	}
	if !moved {
		t.Error("no manifest names the tree moved aside")
	}
}

// umaskGroupWrite reports whether this process's umask gives group write.
func umaskGroupWrite(t *testing.T) bool {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "Umask:"); ok {
			m, err := strconv.ParseUint(strings.TrimSpace(v), 8, 32)
			return err == nil && m&0o020 == 0
		}
	}
	t.Fatal("no umask in /proc/self/status")
	return false
}

// Modes a command sets are the owner's to give: chmod cannot give others
// write access or the sticky bit (nor the group write access where the
// server's umask withholds it), and what the command made under a umask
// of its own is taken back after it. Nothing in the workspace, the
// workspace itself included, is left writable by others or sticky, so no
// other local user can plant files there between two commands.
func TestContainmentModesNormalised(t *testing.T) {
	c := startContainment(t, "")
	group := os.FileMode(0)
	if umaskGroupWrite(t) {
		group = 0o020
	}
	ran(t, "setup", c.sh(t, "mkdir d0 && echo x > f0"))
	attempts := []string{"chmod 0777 .", "chmod 1777 d0", "chmod o+w d0", "chmod 0666 f0", "chmod +t f0"}
	if group == 0 {
		attempts = append(attempts, "chmod g+w f0", "chmod 0775 d0")
	}
	for _, a := range attempts {
		if r := c.sh(t, a); r.err != nil || r.exit.GetExitCode() == 0 {
			t.Errorf("%s: %+v", a, r)
		}
	}
	ran(t, "widen by umask", c.sh(t, "umask 000 && mkdir d1 && echo x > f && mkdir -p d2/sub && echo y > d2/sub/g"))
	for name, want := range map[string]os.FileMode{".": 0o755, "d0": 0o755, "f0": 0o644, "d1": 0o755 | group, "d2/sub": 0o755 | group,
		"f": 0o644 | group, "d2/sub/g": 0o644 | group} {
		fi, err := os.Lstat(filepath.Join(c.ws, name))
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode() & (os.ModePerm | os.ModeSticky); got != want {
			t.Errorf("%s: %v, want %v", name, got, want)
		}
	}
	if r := strings.Join(lastResult(t, c.in).Lists["restored_modes"], "\n"); !strings.Contains(r, "d1") || !strings.Contains(r, "d2/sub/g") {
		t.Errorf("restored_modes %q", r)
	}
	ran(t, "the next command", c.sh(t, "true"))
}

// What the owner's tools load from a project folder is protected like
// the rest: git's operation state (an interactive rebase's todo runs its
// exec lines on `git rebase --continue`), even where the rule may write
// git data; AI agents' configuration (hooks, MCP servers), Emacs's
// directory variables, dotenv files and a virtual environment, at any
// depth. Present, read-only; created, quarantined. A rule may opt in
// (writable: [.venv]).
func TestContainmentOwnerToolsProtected(t *testing.T) {
	c := startContainment(t, envGit)
	for name, data := range map[string]string{".env": "OWNER=1\n", ".claude/settings.json": "{}\n", ".git/MERGE_MSG": "the owner's\n"} {
		write(t, filepath.Join(c.ws, name), data)
	}
	testserver.SandboxWorkspace(t, c.ws)
	for _, attempt := range []result{
		c.sh(t, "echo 'NODE_OPTIONS=--require ./evil.js' >> .env"),
		c.sh(t, `echo '{"hooks":{}}' > .claude/settings.json`),
		c.gitSh(t, "echo evil >> .git/MERGE_MSG"),
		c.gitSh(t, "rm .git/MERGE_MSG"),
	} {
		if attempt.err != nil || attempt.exit.GetExitCode() == 0 {
			t.Errorf("a protected file was written: %+v", attempt)
		}
	}
	ran(t, "plant git state", c.gitSh(t, "mkdir -p .git/rebase-merge && echo 'exec touch pwned' > .git/rebase-merge/git-rebase-todo && echo x > .git/CHERRY_PICK_HEAD && echo x > .git/BISECT_NEW && git init -q sub && mkdir sub/.git/sequencer"))
	ran(t, "plant", c.sh(t, `echo '{"mcpServers":{}}' > .mcp.json && mkdir -p pkg/.cursor .gemini .codex .venv/bin && echo x > pkg/.cursor/mcp.json &&
echo '((nil . ((eval . (shell-command "x")))))' > .dir-locals.el && echo NODE_OPTIONS=x > pkg/.env.local && echo x > .venv/bin/python &&
echo 'test-cmd: evil' > .aider.conf.yml && echo x > pkg/.envrc2 && echo ok > plain.txt`))
	for _, gone := range []string{".git/rebase-merge", ".git/CHERRY_PICK_HEAD", ".git/BISECT_NEW", "sub/.git/sequencer", ".mcp.json", "pkg/.cursor",
		".gemini", ".codex", ".dir-locals.el", "pkg/.env.local", ".venv", ".aider.conf.yml"} {
		if _, err := os.Lstat(filepath.Join(c.ws, gone)); err == nil {
			t.Errorf("%s was left in place", gone)
		}
	}
	for _, kept := range []string{"plain.txt", "pkg/.envrc2", "sub/.git/HEAD"} {
		if _, err := os.Lstat(filepath.Join(c.ws, kept)); err != nil {
			t.Errorf("%s: %v", kept, err)
		}
	}
	// The switch: a rule that may write the virtual environment keeps it.
	r := execArgv(t, c.in, "/usr/bin/nice", "sh", "-c", "mkdir -p .venv/bin && echo x > .venv/bin/python")
	ran(t, "writable .venv", r)
	if _, err := os.Stat(filepath.Join(c.ws, ".venv/bin/python")); err != nil {
		t.Errorf("a rule with writable: [.venv] lost it: %v", err)
	}
}

func write(t *testing.T, path, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

// A workspace the check after a command cannot cover (here: more entries
// in the workspace's own top directory than the scan's budget, which
// nothing can move aside) is refused, for the rules that use it alone,
// audited, across restarts, naming its repair; the server does not lock
// out, and other rules go on. Once repaired, the next command runs and
// the repair is audited.
func TestContainmentUncheckedWorkspaceRefused(t *testing.T) {
	c := startContainmentWith(t, "", testserver.Options{ScanBudget: sandbox.ScanBudget{Entries: 20}})
	ran(t, "flood", c.sh(t, "i=0; while [ $i -lt 100 ]; do : > f$i; i=$((i+1)); done"))
	refused := func() {
		t.Helper()
		r := c.sh(t, "true")
		wantCode(t, r.err, refusal.SandboxUnavailable)
		if !strings.Contains(r.err.Error(), "coily workspace repair ws") {
			t.Fatalf("the refusal does not name the repair: %v", r.err)
		}
	}
	refused()
	if r := execArgv(t, c.in, "/bin/sleep", "0"); r.err != nil {
		t.Fatalf("a rule without the workspace: %v", r.err)
	}
	st, err := c.in.Client.API.Status(context.Background(), &coilyv1.StatusRequest{})
	if err != nil || st.GetLockout().GetActive() {
		t.Fatalf("the server locked out: %v %v", st.GetLockout(), err)
	}
	c.in.WaitAudit(t, func(r audit.Record) bool {
		return r.Event == workspace.EventRefused && r.Details["workspace"] == "ws"
	})
	c.in = c.in.Restart(c.opts)
	refused()

	// The owner looks, removes the flood, and repairs.
	if err := removePrefixed(c.ws, "f"); err != nil {
		t.Fatal(err)
	}
	ws, err := workspace.ListRefused(c.in.StateDir)
	if err != nil || len(ws) != 1 || ws[0].Workspace != "ws" {
		t.Fatalf("refused workspaces %+v %v", ws, err)
	}
	if err := workspace.Repair(c.in.StateDir, ws[0], "owner", time.Now()); err != nil {
		t.Fatal(err)
	}
	ran(t, "after the repair", c.sh(t, "true"))
	rec := c.in.WaitAudit(t, func(r audit.Record) bool { return r.Event == workspace.EventRepaired })
	if rec.Principal != "owner" {
		t.Errorf("repair audited as %q", rec.Principal)
	}
}

// removePrefixed removes the files of dir whose names start with prefix.
func removePrefixed(dir, prefix string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), prefix) {
			if err := os.Remove(filepath.Join(dir, e.Name())); err != nil {
				return err
			}
		}
	}
	return nil
}
