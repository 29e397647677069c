package gitproxy

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	coilyv1 "coily.dev/coily/proto/coily/v1"
)

// Clone, fetch and push through the proxy with real git on both sides,
// in protocol v2 and v0: a new branch, a fast-forward, a forced update
// refused by the approver then approved, a delete refused, a ref outside
// the patterns refused.
func TestCloneFetchPush(t *testing.T) {
	for _, proto := range []string{"2", "0"} {
		t.Run("v"+proto, func(t *testing.T) {
			e := newEnv(t, "")
			e.seed("owner/app")
			work := filepath.Join(t.TempDir(), "work")
			e.git("", "-c", "protocol.version="+proto, "clone", "--quiet", e.url("owner/app.git"), work)
			e.git(work, "config", "protocol.version", proto)
			if got := strings.TrimSpace(e.git(work, "rev-parse", "HEAD")); got != e.up.Ref(t, "owner/app", "refs/heads/main") {
				t.Fatalf("clone at %s", got)
			}
			if f := e.rec.events("git.fetch"); len(f) == 0 || f[len(f)-1].Details["bytes"] == "" || f[0].Details["remote"] != "app" {
				t.Fatalf("fetch records: %+v", f)
			}

			e.git(work, "checkout", "--quiet", "-b", "agent/x")
			c1 := e.commit(work, "a", "one")
			e.git(work, "push", "--quiet", "origin", "agent/x")
			if got := e.up.Ref(t, "owner/app", "refs/heads/agent/x"); got != c1 {
				t.Fatalf("new branch upstream at %q, want %s", got, c1)
			}
			if r := e.lastPush(); r.Decision != "allow" || !strings.Contains(strings.Join(r.Lists["updates"], ","), "create") {
				t.Fatalf("push record: %+v", r)
			}

			c2 := e.commit(work, "b", "two")
			e.git(work, "push", "--quiet", "origin", "agent/x")
			if got := e.up.Ref(t, "owner/app", "refs/heads/agent/x"); got != c2 {
				t.Fatalf("fast-forward upstream at %q, want %s", got, c2)
			}

			e.git(work, "commit", "--quiet", "--amend", "-m", "two, amended")
			amended := strings.TrimSpace(e.git(work, "rev-parse", "HEAD"))
			decided := e.approveNext(coilyv1.Verdict_VERDICT_DENY)
			out, err := e.try(work, "push", "--force", "origin", "agent/x")
			if err == nil || !strings.Contains(out, "confirm-rejected") {
				t.Fatalf("forced update denied by the approver: err=%v\n%s", err, out)
			}
			a := <-decided
			if !strings.Contains(strings.Join(a.GetArgv(), " "), "force") || !strings.Contains(a.GetRequestNote(), "two, amended") {
				t.Errorf("approval does not show the push: %v %q", a.GetArgv(), a.GetRequestNote())
			}
			e.mu.Lock()
			heard := e.waiting
			e.mu.Unlock()
			if len(heard) != 1 || heard[0].GetId() != a.GetId() || !strings.Contains(strings.Join(heard[0].GetArgv(), " "), "force") {
				t.Errorf("the notifier heard %v, want the push's approval %s once", heard, a.GetId())
			}
			if got := e.up.Ref(t, "owner/app", "refs/heads/agent/x"); got != c2 {
				t.Fatalf("refused force moved upstream to %s", got)
			}
			decided = e.approveNext(coilyv1.Verdict_VERDICT_APPROVE)
			e.git(work, "push", "--quiet", "--force", "origin", "agent/x")
			<-decided
			if got := e.up.Ref(t, "owner/app", "refs/heads/agent/x"); got != amended {
				t.Fatalf("approved force: upstream at %s, want %s", got, amended)
			}
			if r := e.lastPush(); r.Details["approval"] == "" || r.Decision != "allow" {
				t.Fatalf("approved push record: %+v", r)
			}

			out, err = e.try(work, "push", "origin", ":agent/x")
			if err == nil || !strings.Contains(out, "policy-deny") || e.up.Ref(t, "owner/app", "refs/heads/agent/x") != amended {
				t.Fatalf("delete: err=%v\n%s", err, out)
			}
			out, err = e.try(work, "push", "origin", "HEAD:refs/heads/main")
			if err == nil || !strings.Contains(out, "policy-deny") {
				t.Fatalf("push to main: err=%v\n%s", err, out)
			}

			e.git(work, "fetch", "--quiet", "origin")
		})
	}
}

// What a proxy that crashed left in its directory (pushes in flight, a
// cache half made) is removed when the next one starts; caches stay.
func TestNewRemovesLeftovers(t *testing.T) {
	dir := t.TempDir()
	e := newEnv(t, "", func(c *Config) { c.Dir = dir })
	left := []string{filepath.Join(dir, "push", "p-123", "repo.git", "objects", "tmp_objdir-incoming-x", "pack"),
		filepath.Join(dir, "cache", ".init-456", "objects")}
	keep := filepath.Join(dir, "cache", "0123abcd.git", "objects")
	for _, d := range append(left, keep) {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := New(e.proxy.cfg); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "push", "p-123")); !os.IsNotExist(err) {
		t.Errorf("a push's directory survived: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "cache", ".init-456")); !os.IsNotExist(err) {
		t.Errorf("a half-made cache survived: %v", err)
	}
	if _, err := os.Stat(keep); err != nil {
		t.Errorf("a cache was removed: %v", err)
	}
}
