package server_test

import (
	"os"
	"slices"
	"testing"
)

// What the check must quarantine moves even where the command took
// write access away from it and from its parent (chmod 555 on its own
// plant, on the directory holding it, on the workspace itself): the
// mode is given back to the owner (listed in restored_modes) and the
// move done. Meaningful for a server that is not root (root writes
// through any mode): CI runs it as both.
func TestContainmentQuarantineReadOnlyPlant(t *testing.T) {
	c := startContainment(t, "")
	ran(t, "plant", c.sh(t, `mkdir -p .claude pkg/deep && echo '{"hooks":{}}' > .claude/settings.json && chmod 555 .claude &&
echo x > pkg/deep/.envrc && chmod 555 pkg/deep && echo x > .mcp.json && chmod 555 .`))
	gone(t, c, ".claude", "pkg/deep/.envrc", ".mcp.json")
	rec := lastResult(t, c.in)
	if len(rec.Lists["unchecked"]) != 0 {
		t.Fatalf("unchecked %q", rec.Lists["unchecked"])
	}
	if os.Geteuid() != 0 {
		for _, p := range []string{".", ".claude", "pkg/deep"} {
			if !slices.Contains(rec.Lists["restored_modes"], p) {
				t.Errorf("restored_modes %q, want %s among them", rec.Lists["restored_modes"], p)
			}
		}
	}
	ran(t, "the next command", c.sh(t, "true"))
}
