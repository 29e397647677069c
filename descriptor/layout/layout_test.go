package layout

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestPath(t *testing.T) {
	got := Path("/m", RequestsDir, FileName("5b0c5a4e-3f8d-4c2a-9e71-0d6f3b2a1c84"))
	want := filepath.Join("/m", ".coily", "requests", "5b0c5a4e-3f8d-4c2a-9e71-0d6f3b2a1c84.json")
	if got != want {
		t.Fatalf("Path = %q, want %q", got, want)
	}
}

// The lean clients may import this package only while it links nothing
// but the standard library.
func TestLinksOnlyTheStandardLibrary(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	if deps := strings.Fields(string(out)); len(deps) != 1 || deps[0] != "coily.dev/coily/descriptor/layout" {
		t.Fatalf("layout links %v", deps)
	}
}
