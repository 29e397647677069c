package sandbox

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// inRootDir reports whether rel is in root (not following a link).
func inRootDir(t *testing.T, root, rel string) bool {
	t.Helper()
	_, err := os.Lstat(filepath.Join(root, rel))
	return err == nil
}

// Under `writable: [.git]`, a directory dressed as a bare repository
// hides nothing: one the command made is quarantined whole (the rule
// keeps the repositories it makes under the name .git, and submodules'
// under modules/), and what lies in a git directory the rule may write,
// but for its git data (objects, refs, logs…), is walked like the rest
// of the workspace, before the command (protected) and after it
// (quarantined, modes taken back).
func TestScanAfterBareRepository(t *testing.T) {
	root := t.TempDir()
	gitRepo(t, filepath.Join(root, ".git"))
	gitRepo(t, filepath.Join(root, "owner.git"))
	write(t, filepath.Join(root, "owner.git/notes/.envrc"), "the owner's\n")
	writable := []string{GitName}
	r := scanned(t, root, writable)
	if !slices.ContainsFunc(r.found, func(e protected) bool { return e.rel == "owner.git/notes/.envrc" }) {
		t.Errorf("the scan before a command left owner.git/notes/.envrc writable")
	}

	gitRepo(t, filepath.Join(root, "app"))
	write(t, filepath.Join(root, "app/.claude/settings.json"), `{"hooks":{}}`)
	gitRepo(t, filepath.Join(root, ".git/modules/sub"))
	write(t, filepath.Join(root, ".git/objects/ab/.envrc"), "data\n")
	plants := []string{"owner.git/.env", "owner.git/x/.claude/settings.json", "owner.git/x/.mcp.json", "owner.git/x/.venv/bin/python",
		"owner.git/.vscode/tasks.json", "owner.git/x/sub/.git/hooks/pre-commit", ".git/foo/.envrc"}
	for _, p := range plants {
		write(t, filepath.Join(root, p), "x\n")
	}
	if err := os.MkdirAll(filepath.Join(root, "owner.git/wide"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(root, "owner.git/wide"), 0o777); err != nil {
		t.Fatal(err)
	}
	done, _, err := r.quarantine(writable, "T")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range append(plants, "app") {
		if inRootDir(t, root, p) {
			t.Errorf("%s was left in place (quarantined %q)", p, done)
		}
	}
	for _, kept := range []string{".git/modules/sub/HEAD", ".git/objects/ab/.envrc", "owner.git/HEAD", "owner.git/notes/.envrc"} {
		if !inRootDir(t, root, kept) {
			t.Errorf("%s was quarantined", kept)
		}
	}
	want := os.FileMode(0o755)
	if groupWritable() {
		want |= 0o020
	}
	if fi, err := os.Lstat(filepath.Join(root, "owner.git/wide")); err != nil || fi.Mode().Perm() != want {
		t.Errorf("owner.git/wide: %v %v, want %v", fi.Mode(), err, want)
	}
}

// deepChain makes rel, a chain of directories, one at a time.
func deepChain(t *testing.T, root, rel string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(root, rel), 0o755); err != nil {
		t.Fatal(err)
	}
}

// Submodule git directories nested deeper than the scan goes
// (.git/modules/a/a/a…) refuse the command before it, like any other
// tree too deep, and are moved aside after the command that made them:
// the walk is the scan's own (a queue, its depth bound, its entries and
// time budget), not a recursion of its own.
func TestScanAfterDeepModules(t *testing.T) {
	root := t.TempDir()
	gitRepo(t, filepath.Join(root, ".git"))
	writable := []string{GitName}
	r := scanned(t, root, writable)
	chain := ".git/modules/" + strings.Repeat("a/", 200) + "f"
	deepChain(t, root, chain)
	res := r.check(writable, "T", r.since, ScanBudget{})
	if res.err != nil || len(res.aside) != 1 || !strings.HasPrefix(res.aside[0], ".git/modules/a/a/") {
		t.Fatalf("moved aside %q (%v), want the part past the bound", res.aside, res.err)
	}
	if _, err := scanRoot(r.dir, root, writable, false, ScanBudget{}); err != nil {
		t.Fatalf("the next scan: %v", err)
	}
	deepChain(t, root, chain)
	if _, err := scanRoot(r.dir, root, writable, false, ScanBudget{}); err == nil || !strings.Contains(err.Error(), "too deep") {
		t.Fatalf("the scan before a command of a tree too deep in .git/modules: %v", err)
	}
}

// configRepo makes a repository at rel whose config includes each of
// values.
func configRepo(t *testing.T, root, rel string, values []string) {
	t.Helper()
	gitRepo(t, filepath.Join(root, rel))
	var b strings.Builder
	b.WriteString("[include]\n")
	for _, v := range values {
		b.WriteString("\tpath = " + v + "\n")
	}
	write(t, filepath.Join(root, rel, "config"), b.String())
}

// Git configuration never takes a scan past its budget, whatever it
// names: hundreds of paths each through /proc/self/root eighty times, or
// a hundred thousand included paths (1 MiB). Before a command it is
// refused at once (past the paths a config may name); after it, the
// configuration of a repository the command made is not read at all
// (the repository is quarantined whole).
func TestScanAfterConfigInBudget(t *testing.T) {
	proc := strings.Repeat("/proc/self/root", 80) + "/x"
	many := make([]string, 96_000)
	for i := range many {
		many[i] = "i" + strconv.Itoa(i)
	}
	budget := ScanBudget{Time: time.Second}
	for name, values := range map[string][]string{"proc": slices.Repeat([]string{proc}, 400), "many": many} {
		t.Run(name, func(t *testing.T) {
			root := t.TempDir()
			r := scanned(t, root, nil)
			configRepo(t, root, "b1", values)
			configRepo(t, root, "b2", values)
			start := time.Now()
			res := r.check(nil, "T", r.since, budget)
			if took := time.Since(start); took > 5*time.Second {
				t.Errorf("the check took %s", took)
			}
			if res.err != nil || !slices.Equal(res.quarantined, []string{"b1", "b2"}) {
				t.Errorf("quarantined %q (%v), want b1 and b2", res.quarantined, res.err)
			}
			configRepo(t, root, "b1", values)
			start = time.Now()
			_, err := scanRoot(r.dir, root, nil, false, budget)
			if took := time.Since(start); took > 5*time.Second {
				t.Errorf("the scan before took %s", took)
			}
			if err == nil {
				t.Error("the scan before a command took the config")
			}
		})
	}
}
