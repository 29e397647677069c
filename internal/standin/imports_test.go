package standin

import (
	"os/exec"
	"strings"
	"testing"
)

const importPath = "coily.dev/coily/internal/standin"

// TestNotImportedByProduction asserts that no package of the module
// imports standin outside its _test.go files, and that coily's command
// does not depend on it.
func TestNotImportedByProduction(t *testing.T) {
	goBin := Need(t, "go", "install Go")
	out, err := exec.Command(goBin, "list", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, "coily.dev/coily/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	var pkgs int
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		pkgs++
		for _, imp := range fields[1:] {
			if imp == importPath {
				t.Errorf("%s imports %s outside its tests", fields[0], importPath)
			}
		}
	}
	if pkgs < 10 {
		t.Fatalf("go list named only %d packages:\n%s", pkgs, out)
	}
	deps, err := exec.Command(goBin, "list", "-deps", "coily.dev/coily/cmd/coily").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	if !strings.Contains(string(deps), "coily.dev/coily/server\n") {
		t.Fatalf("go list -deps ./cmd/coily looks wrong:\n%.500s", deps)
	}
	for _, dep := range strings.Fields(string(deps)) {
		if dep == importPath {
			t.Errorf("cmd/coily depends on %s", importPath)
		}
	}
}
