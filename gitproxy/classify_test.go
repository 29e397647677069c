package gitproxy

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	coilyv1 "coily.dev/coily/proto/coily/v1"
)

// A remote that allows tags allows making them: moving an existing tag is
// a force and deleting one a delete, which it must allow of its own. A
// branch names a commit: a tag, tree or blob pushed as a branch is
// refused whatever the policy allows.
func TestPushClassification(t *testing.T) {
	e := newEnv(t, `    - name: tags
      url: https://localhost:{port}/owner/other
      roles: [agent]
      credential: file:token
      ca_file: {ca}
      allow_cidrs: [127.0.0.0/8, "::1/128"]
      push:
        refs: ["refs/tags/*", "refs/heads/agent/*"]
        tag: allow
        create: allow
        fast_forward: allow
`)
	e.seed("owner/other")
	work := filepath.Join(t.TempDir(), "w")
	e.git("", "clone", "--quiet", e.url("owner/other"), work)
	e.git(work, "tag", "-a", "-m", "one", "v1")
	e.git(work, "push", "--quiet", "origin", "v1")
	v1 := e.up.Ref(t, "owner/other", "refs/tags/v1")
	if v1 == "" {
		t.Fatal("a new tag was refused")
	}
	e.commit(work, "b", "two")
	e.git(work, "tag", "-a", "-m", "two", "v2")
	for _, c := range []struct {
		name string
		args []string
		ref  string
	}{
		{"a tag moved", []string{"push", "--force", "origin", "v2:refs/tags/v1"}, "refs/tags/v1"},
		{"a tag deleted", []string{"push", "origin", ":refs/tags/v1"}, "refs/tags/v1"},
		{"a tag as a branch", []string{"push", "origin", "v2:refs/heads/agent/t"}, "refs/heads/agent/t"},
		{"a tree as a branch", []string{"push", "origin", "HEAD^{tree}:refs/heads/agent/tree"}, "refs/heads/agent/tree"},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := e.up.Ref(t, "owner/other", c.ref)
			defer func() { o, _ := e.try(work, c.args...); t.Log(o) }()
			out, err := e.try(work, c.args...)
			if err == nil || !strings.Contains(out, "policy-deny") && !strings.Contains(out, "bad-request") || strings.Contains(out, "upstream refused") {
				t.Fatalf("push accepted, or refused without the proxy's reason: err=%v\n%s", err, out)
			}
			if got := e.up.Ref(t, "owner/other", c.ref); got != before {
				t.Fatalf("upstream's %s moved from %q to %q", c.ref, before, got)
			}
		})
	}
}

// The commits an update adds and drops are counted whole, however many
// and however long their messages: a push of commits whose subjects
// overflow what the proxy reads of git's listing is not told as fewer
// commits to the audit and the approver.
func TestPushCommitsCounted(t *testing.T) {
	e := newEnv(t, "")
	e.seed("owner/app")
	work := filepath.Join(t.TempDir(), "w")
	e.git("", "clone", "--quiet", e.url("owner/app.git"), work)
	e.git(work, "checkout", "--quiet", "-b", "agent/c")
	for i := range 12 {
		e.commit(work, "f", fmt.Sprintf("commit %d", i))
	}
	e.git(work, "push", "--quiet", "origin", "agent/c")
	wantUpdate(t, e, "create +12 -0 allow")

	long := filepath.Join(t.TempDir(), "msg")
	for i := range 5 {
		msg := fmt.Sprintf("long %d %s\n", i, strings.Repeat("x", 300<<10))
		if err := os.WriteFile(long, []byte(msg), 0o600); err != nil {
			t.Fatal(err)
		}
		e.git(work, "commit", "--quiet", "--allow-empty", "-F", long)
	}
	e.git(work, "push", "--quiet", "origin", "agent/c")
	wantUpdate(t, e, "fast_forward +5 -0 allow")

	e.git(work, "reset", "--quiet", "--hard", "HEAD~3")
	e.commit(work, "g", "instead")
	decided := e.approveNext(coilyv1.Verdict_VERDICT_APPROVE)
	e.git(work, "push", "--quiet", "--force", "origin", "agent/c")
	<-decided
	wantUpdate(t, e, "force +1 -3 confirm")
}

// wantUpdate fails unless the last push's one update ends with want.
func wantUpdate(t *testing.T, e *env, want string) {
	t.Helper()
	if u := e.lastPush().Lists["updates"]; len(u) != 1 || !strings.HasSuffix(u[0], want) {
		t.Fatalf("push's updates %q, want one ending %q", u, want)
	}
}
