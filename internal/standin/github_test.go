package standin

import (
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestGitHubEnterpriseGHIssueCreateView(t *testing.T) {
	Need(t, "gh", GitHubHint)
	start := time.Now()
	g := GitHubEnterprise(t, "ghe-token-1")
	since(t, "GitHubEnterprise", start)
	env := g.Env(t)

	out := run(t, "", env, "gh", "issue", "create", "-R", "owner/repo", "--title", "Stand-in title", "--body", "Stand-in body")
	want := g.URL + "/owner/repo/issues/1"
	if !strings.Contains(out, want) {
		t.Fatalf("gh issue create printed %q, want the issue URL %s", out, want)
	}
	issues := g.Issues()
	if len(issues) != 1 || issues[0] != (Issue{Repo: "owner/repo", Number: 1, Title: "Stand-in title", Body: "Stand-in body"}) {
		t.Fatalf("issues recorded = %+v", issues)
	}

	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("requests: %q", g.Requests())
		}
	})
	out = run(t, "", env, "gh", "issue", "view", "1", "-R", "owner/repo")
	for _, s := range []string{"Stand-in title", "Stand-in body", g.Login} {
		if !strings.Contains(out, s) {
			t.Errorf("gh issue view output lacks %q:\n%s", s, out)
		}
	}
	if _, err := tryRun(t, "", env, "gh", "issue", "view", "2", "-R", "owner/repo"); err == nil {
		t.Error("gh issue view 2 succeeded for an issue never created")
	}
	if !slices.Contains(g.Requests(), "POST /api/graphql mutation IssueCreate") {
		t.Errorf("requests do not show the createIssue mutation: %q", g.Requests())
	}
}

func TestGitHubEnterpriseRefusesWrongToken(t *testing.T) {
	Need(t, "gh", GitHubHint)
	g := GitHubEnterprise(t, "ghe-token-1")
	env := append(g.Env(t), "GH_ENTERPRISE_TOKEN=wrong-token")
	out, err := tryRun(t, "", env, "gh", "issue", "create", "-R", "owner/repo", "--title", "T", "--body", "B")
	if err == nil {
		t.Fatalf("gh issue create with a wrong token succeeded:\n%s", out)
	}
	if strings.Contains(out, "wrong-token") || strings.Contains(out, g.Token) {
		t.Errorf("gh output shows a token:\n%s", out)
	}
	if n := len(g.Issues()); n != 0 {
		t.Fatalf("%d issues recorded with a wrong token", n)
	}
	for _, r := range g.Requests() {
		if !strings.HasPrefix(r, "401 ") {
			t.Errorf("request %q was served with a wrong token", r)
		}
	}
}

// gh pr create --head: refused while the branch does not exist (as
// GitHub refuses it), created once it does, and not created twice for
// one branch (gh finds the open one).
func TestGitHubEnterpriseGHPRCreate(t *testing.T) {
	Need(t, "gh", GitHubHint)
	g := GitHubEnterprise(t, "ghe-token-1")
	var pushed atomic.Bool // the test writes it, the stand-in's handler reads it
	g.SetBranches(func(repo, branch string) bool { return pushed.Load() && repo == "owner/repo" && branch == "agent/x" })
	env := g.Env(t)
	create := []string{"pr", "create", "-R", "owner/repo", "--head", "agent/x", "--base", "main", "--title", "T", "--body", "B"}
	if out, err := tryRun(t, t.TempDir(), env, "gh", create...); err == nil || !strings.Contains(out, "Head ref must be a branch") {
		t.Fatalf("gh pr create of a missing branch: %v\n%s", err, out)
	}
	pushed.Store(true)
	out := run(t, t.TempDir(), env, "gh", create...)
	if want := g.URL + "/owner/repo/pull/1"; !strings.Contains(out, want) {
		t.Fatalf("gh pr create printed %q, want %s", out, want)
	}
	if prs := g.PullRequests(); len(prs) != 1 || prs[0] != (PullRequest{Repo: "owner/repo", Number: 1, Title: "T", Body: "B", Head: "agent/x", Base: "main"}) {
		t.Fatalf("pull requests recorded = %+v", prs)
	}
	if out, err := tryRun(t, t.TempDir(), env, "gh", create...); err == nil || !strings.Contains(out, "already exists") {
		t.Fatalf("a second gh pr create for the branch: %v\n%s", err, out)
	}
	if n := len(g.PullRequests()); n != 1 {
		t.Fatalf("%d pull requests for one branch", n)
	}
}
