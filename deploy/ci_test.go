package deploy

import (
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

// TestCIRunsTheREADMECommand: .ci/run exports CI=true and then runs the
// README's test command, exactly.
func TestCIRunsTheREADMECommand(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)\\*\\*Run the whole test suite\\*\\*.*?```sh\n([^\n]+)\n```").FindSubmatch(readme)
	if m == nil {
		t.Fatal("README.md: no test command after **Run the whole test suite**")
	}
	command := string(m[1])
	run, err := os.ReadFile("../.ci/run")
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("bash", "-n", "../.ci/run").CombinedOutput(); err != nil {
		t.Fatalf("bash -n .ci/run: %v\n%s", err, out)
	}
	var lines []string
	for line := range strings.Lines(string(run)) {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			lines = append(lines, line)
		}
	}
	if len(lines) < 2 || lines[len(lines)-1] != "exec "+command || lines[len(lines)-2] != "export CI=true" {
		t.Errorf(".ci/run ends with %q, want export CI=true, then exec %s", lines, command)
	}
}
