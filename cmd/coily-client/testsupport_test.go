package main

import (
	"os/exec"
	"strings"
	"testing"
)

// The packages under internal/ are test support (servers, stand-ins,
// fixtures, log writers), save internal/devnet, which `coily dev` runs.
// No command links one, in either build, but the development build
// (-tags coilydev) links devnet; no package outside internal/ imports one
// outside its tests, but devnet in the development build.
func TestNoCommandLinksTestSupport(t *testing.T) {
	out, err := exec.Command("go", "list", "coily.dev/coily/cmd/...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	var cmds []string
	for _, p := range strings.Fields(string(out)) {
		if strings.HasPrefix(p, "coily.dev/coily/cmd/") {
			cmds = append(cmds, p)
		}
	}
	if len(cmds) < 3 {
		t.Fatalf("commands of the module: %v", cmds)
	}
	for _, tags := range [][]string{nil, {"coilydev"}} {
		for _, cmd := range cmds {
			for _, p := range deps(t, cmd, tags...) {
				if isTestSupport(p) && !(len(tags) > 0 && p == "coily.dev/coily/internal/devnet") {
					t.Errorf("%s (tags %v) links %s", cmd, tags, p)
				}
			}
		}
	}
	for _, tags := range []string{"", "coilydev"} {
		out, err := exec.Command("go", "list", "-tags", tags, "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, "coily.dev/coily/...").CombinedOutput()
		if err != nil {
			t.Fatalf("go list: %v\n%s", err, out)
		}
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			f := strings.Fields(line)
			if isTestSupport(f[0]) {
				continue
			}
			for _, imp := range f[1:] {
				if isTestSupport(imp) && !(tags != "" && imp == "coily.dev/coily/internal/devnet") {
					t.Errorf("%s (tags %q) imports %s outside its tests", f[0], tags, imp)
				}
			}
		}
	}
}

func isTestSupport(pkg string) bool { return strings.HasPrefix(pkg, "coily.dev/coily/internal/") }
