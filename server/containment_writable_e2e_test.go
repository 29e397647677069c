package server_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"coily.dev/coily/refusal"
)

// A protected file the rule may write is written the way git and editors
// write it, by a lock file renamed over it: git config, sed -i on .envrc
// succeed and land. No mount point is left at its name to refuse the
// rename ("Device or resource busy").
func TestContainmentWritableFileRenamed(t *testing.T) {
	c := startContainment(t, `  - {name: bash, binary: /bin/bash, args: ["**"], flags: any, workspace: ws, writable: [.git, .git/config, .envrc]}
`)
	if err := os.WriteFile(filepath.Join(c.ws, ".envrc"), []byte("export A=1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, script := range []string{
		"git config user.name written-by-rename",
		"git branch --set-upstream-to=nowhere 2>/dev/null; git config branch.main.merge refs/heads/main",
		"sed -i s/A=1/A=2/ .envrc",
	} {
		r := execArgv(t, c.in, "/bin/bash", "-c", script)
		if r.err != nil || r.exit.GetExitCode() != 0 || strings.Contains(r.stderr, "busy") {
			t.Fatalf("%s: %+v", script, r)
		}
	}
	if cfg := git(t, c.ws, "config", "--local", "--list"); !strings.Contains(cfg, "user.name=written-by-rename") || !strings.Contains(cfg, "branch.main.merge=refs/heads/main") {
		t.Fatalf(".git/config was not written: %s", cfg)
	}
	if b, _ := os.ReadFile(filepath.Join(c.ws, ".envrc")); string(b) != "export A=2\n" {
		t.Fatalf(".envrc = %q", b)
	}
	// Under the rule that may not write them, they stay read-only as a
	// whole: neither written in place nor replaced.
	for _, script := range []string{"sed -i s/A=2/A=3/ .envrc", "echo x >> .envrc", "mv .envrc .e", "git config user.name evil"} {
		if r := c.sh(t, script); r.err != nil || r.exit.GetExitCode() == 0 {
			t.Errorf("%s under the sh rule: %+v", script, r)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(c.ws, ".envrc")); string(b) != "export A=2\n" {
		t.Fatalf(".envrc = %q after the sh rule", b)
	}
}

// A protected file the rule may write is no mount point, so a command can
// swap a link in at its name: a symbolic link it put there is quarantined
// after it (the host's tools would follow it), a hard link refuses every
// rule that may not write the file until it is gone.
func TestContainmentWritableFileLinkSwapped(t *testing.T) {
	c := startContainment(t, `  - {name: bash, binary: /bin/bash, args: ["**"], flags: any, workspace: ws, writable: [.git, .git/config, .envrc]}
`)
	if err := os.WriteFile(filepath.Join(c.ws, ".envrc"), []byte("# the owner's\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := execArgv(t, c.in, "/bin/bash", "-c", "echo x > notes && ln -sf notes .envrc && ln -sf ../notes .git/config.tmp && mv .git/config.tmp .git/config")
	if r.err != nil || r.exit.GetExitCode() != 0 {
		t.Fatalf("swap: %+v", r)
	}
	for _, name := range []string{".envrc", ".git/config"} {
		if fi, err := os.Lstat(filepath.Join(c.ws, name)); err == nil && fi.Mode()&os.ModeSymlink != 0 {
			t.Errorf("%s: the link swapped in was left in place", name)
		}
	}
	if q := strings.Join(lastResult(t, c.in).Lists["quarantined"], "\n"); !strings.Contains(q, ".envrc") || !strings.Contains(q, ".git/config") {
		t.Errorf("quarantined %q, want .envrc and .git/config", q)
	}
	if r := execArgv(t, c.in, "/bin/bash", "-c", "echo '# mine' > .envrc && ln .envrc notes2"); r.err != nil || r.exit.GetExitCode() != 0 {
		t.Fatalf("hard link: %+v", r)
	}
	r = c.sh(t, "echo ran > ran.txt")
	if r.err == nil || refusal.As(r.err).Code != refusal.SandboxUnavailable || !strings.Contains(r.err.Error(), ".envrc has 2 hard links") {
		t.Fatalf("a rule that may not write .envrc, with it hard-linked: %+v", r)
	}
}
