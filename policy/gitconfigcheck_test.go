package policy_test

import (
	"strings"
	"testing"
)

// TestGitConfigWarning: a rule that may write .git/config in a workspace
// makes every push obligation there blind to a configured + refspec;
// policy check says so, naming both rules. Without the writable config,
// or with the workspace temp, it says nothing.
func TestGitConfigWarning(t *testing.T) {
	ws := t.TempDir()
	head := "version: 1\nworkspaces: {ws: " + ws + "}\ncommands:\n" +
		"  - {name: git-push-force, binary: /usr/bin/git, args: [push, \"**\"], if_flags: [--force, -f], flags: {--force: true, -f: true}, confirm: true}\n"
	for _, tc := range []struct {
		name, rules string
		want        bool
	}{
		{"config writable in the push's workspace", "  - {name: git, binary: /usr/bin/git, args: [\"**\"], flags: any, workspace: ws, writable: [.git, .git/config]}\n", true},
		{"only .git writable", "  - {name: git, binary: /usr/bin/git, args: [\"**\"], flags: any, workspace: ws, writable: [.git]}\n", false},
		{"another program writes the config", "  - {name: git, binary: /usr/bin/git, args: [\"**\"], flags: any, workspace: ws}\n" +
			"  - {name: sed, binary: /bin/sed, args: [\"**\"], flags: any, workspace: ws, writable: [.git/config]}\n", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, w := range parse(t, "check.yaml", head+tc.rules).Warnings() {
				if strings.Contains(w.Msg, "may write .git/config") {
					got = append(got, w.Msg)
				}
			}
			if tc.want != (len(got) == 1) {
				t.Fatalf("warnings %q, want one: %v", got, tc.want)
			}
			if tc.want && (!strings.Contains(got[0], `obligation "git-push-force"`) || !strings.Contains(got[0], `workspace "ws"`)) {
				t.Fatalf("warning %q does not name the obligation and the workspace", got[0])
			}
		})
	}
}
