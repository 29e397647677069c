package gitproxy

import (
	"path/filepath"
	"strings"
	"testing"
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
