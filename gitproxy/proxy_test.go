package gitproxy

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"coily.dev/coily/approvals"
	"coily.dev/coily/audit"
	"coily.dev/coily/internal/standin"
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

// A proxy that stopped mid-request (a crash) left a push's private
// repository and a cache's unfinished first fetch: the next proxy on the
// directory removes both, and keeps the finished caches.
func TestNewRemovesLeftovers(t *testing.T) {
	standin.Need(t, "git", standin.GitHint)
	dir := t.TempDir()
	left := []string{filepath.Join(dir, "push", "p-1", "objects", "incoming-x"), filepath.Join(dir, "cache", ".init-1", "objects")}
	kept := filepath.Join(dir, "cache", "0123.git", "objects")
	for _, d := range append(left, kept) {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	_, err := New(Config{Dir: dir, Gate: &fakeGate{}, Stopped: func(string) error { return nil },
		Record: func(_ context.Context, r audit.Record) (audit.Record, error) { return r, nil }, Approvals: approvals.New(time.Now, nil)})
	if err != nil {
		t.Fatal(err)
	}
	if entries, _ := os.ReadDir(filepath.Join(dir, "push")); len(entries) != 0 {
		t.Errorf("push/ keeps %d entries", len(entries))
	}
	if _, err := os.Stat(filepath.Join(dir, "cache", ".init-1")); !os.IsNotExist(err) {
		t.Errorf("the unfinished cache survived: %v", err)
	}
	if _, err := os.Stat(kept); err != nil {
		t.Errorf("a finished cache was removed: %v", err)
	}
}
