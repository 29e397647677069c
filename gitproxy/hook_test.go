package gitproxy

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A push whose hook request the proxy will not read whole (too many
// updates, a line too long) is refused, and git's hook is answered: the
// push ends instead of holding git, its hook and the request forever.
func TestHookRequestTooLargeRefused(t *testing.T) {
	e := newEnv(t, "")
	e.timeout = 45 * time.Second
	e.seed("owner/app")
	work := filepath.Join(t.TempDir(), "w")
	e.git("", "clone", "--quiet", e.url("owner/app"), work)
	e.commit(work, "a", "agent work")
	many := []string{"push", "origin"}
	for i := range maxUpdates + 10 {
		many = append(many, fmt.Sprintf("HEAD:refs/heads/agent/b%d", i))
	}
	long := "HEAD:refs/heads/agent/" + strings.Repeat("x/", maxHookLine/2)
	for _, c := range []struct {
		name string
		args []string
	}{
		{"too many updates", many},
		{"a line too long", []string{"push", "origin", long[:len(long)-1]}},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, err := e.try(work, c.args...)
			if err == nil {
				t.Fatalf("push accepted:\n%s", out)
			}
			if !strings.Contains(out, "bad-request") {
				t.Fatalf("push refused without the proxy's reason:\n%s", out)
			}
			if got := e.lastPush(); got.Decision != "refuse" {
				t.Fatalf("audit: %+v", got)
			}
		})
	}
	if got := e.up.Ref(t, "owner/app", "refs/heads/agent/b0"); got != "" {
		t.Fatalf("upstream changed: agent/b0 is %s", got)
	}
}
