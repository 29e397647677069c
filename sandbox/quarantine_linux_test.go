package sandbox

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// What the check must quarantine moves even where the command took
// write access away from it or its parent (the workspace included):
// both get their owner's write access back (restored), then it moves.
// Meaningful for a server that is not root: CI runs it as both.
func TestScanAfterReadOnlyPlant(t *testing.T) {
	root := t.TempDir()
	r := scanned(t, root, nil)
	write(t, filepath.Join(root, ".claude/settings.json"), `{"hooks":{}}`)
	write(t, filepath.Join(root, "pkg/.envrc"), "x\n")
	write(t, filepath.Join(root, ".mcp.json"), "x\n")
	for _, d := range []string{".claude", "pkg", "."} {
		if err := os.Chmod(filepath.Join(root, d), 0o555); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = os.Chmod(filepath.Join(root, d), 0o755) })
	}
	done, restored, err := r.quarantine(nil, "T")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{".claude", "pkg/.envrc", ".mcp.json"} {
		if !slices.Contains(done, p) || inRootDir(t, root, p) {
			t.Errorf("%s not quarantined (quarantined %q)", p, done)
		}
	}
	if os.Geteuid() != 0 {
		for _, p := range []string{".", ".claude", "pkg"} {
			if !slices.Contains(restored, p) {
				t.Errorf("restored %q, want %s among them", restored, p)
			}
		}
	}
}

// A plant the check could not move aside (here every name it tries in
// the quarantine directory is taken) is never laundered into the
// owner's: the scan before the next command, and the repair's
// (CheckWorkspace), refuse it by identity wherever it was moved, until
// the owner has removed it.
func TestScanAfterUnmovedPlantRefused(t *testing.T) {
	root := t.TempDir()
	r := scanned(t, root, nil)
	for n := 1; n <= 1001; n++ {
		write(t, filepath.Join(root, QuarantineDir, "T-"+strconv.Itoa(n)), "")
	}
	write(t, filepath.Join(root, ".claude/settings.json"), `{"hooks":{}}`)
	res := r.check(nil, "T", r.since, ScanBudget{})
	if res.err == nil || !strings.Contains(res.err.Error(), ".claude") {
		t.Fatalf("unmoved: %v, want .claude reported", res.err)
	}
	if _, err := CheckWorkspace(root, ScanBudget{}); err == nil || !strings.Contains(err.Error(), ".claude") {
		t.Fatalf("the repair's scan passed the plant: %v", err)
	}
	if err := os.Rename(filepath.Join(root, ".claude"), filepath.Join(root, "pkg.claude")); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(root, "pkg"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(root, "pkg.claude"), filepath.Join(root, "pkg/.claude")); err != nil {
		t.Fatal(err)
	}
	if _, err := scanRoot(r.dir, root, nil, false, ScanBudget{}); err == nil || !strings.Contains(err.Error(), "pkg/.claude") {
		t.Fatalf("the scan before a command passed the plant moved elsewhere: %v", err)
	}
	if err := os.RemoveAll(filepath.Join(root, "pkg/.claude")); err != nil {
		t.Fatal(err)
	}
	if _, err := CheckWorkspace(root, ScanBudget{}); err != nil {
		t.Fatalf("once removed: %v", err)
	}
}
