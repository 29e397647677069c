package policy_test

import (
	"strings"
	"testing"
)

// TestWritableGitEntryWithoutGit: .git/config (or hooks…) writable without
// .git changes nothing, since a git directory's entries are tracked only
// inside a writable one: policy check says so.
func TestWritableGitEntryWithoutGit(t *testing.T) {
	ws := t.TempDir()
	for writable, want := range map[string]bool{"[.git/config]": true, "[.git/hooks, .envrc]": true, "[.git, .git/config]": false, "[.envrc]": false} {
		p := parse(t, "w.yaml", "version: 1\nworkspaces: {ws: "+ws+"}\ncommands:\n  - {name: git, binary: /usr/bin/git, args: [\"**\"], flags: any, workspace: ws, writable: "+writable+"}\n")
		got := false
		for _, w := range p.Warnings() {
			got = got || strings.Contains(w.Msg, "but not .git")
		}
		if got != want {
			t.Errorf("writable: %s: warned %v, want %v", writable, got, want)
		}
	}
}
