package standin

import (
	"fmt"
	"strings"
)

// PullRequest is a pull request created through the stand-in (gh pr
// create: the PullRequestForBranch query, then the createPullRequest
// mutation).
type PullRequest struct {
	Repo   string // "owner/name"
	Number int
	Title  string
	Body   string
	Head   string // the branch, without refs/heads/
	Base   string
}

// PullRequests returns the pull requests created so far.
func (g *GitHub) PullRequests() []PullRequest {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]PullRequest(nil), g.pulls...)
}

// SetBranches makes pull requests need their head branch: has reports
// whether repository owner/name has the branch (a git stand-in's refs,
// say). Without it every branch exists.
func (g *GitHub) SetBranches(has func(repo, branch string) bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.branches = has
}

// createPullRequest records the pull request of a createPullRequest
// mutation (variables.input), refused as GitHub refuses it when its head
// branch does not exist.
func (g *GitHub) createPullRequest(vars map[string]any) (map[string]any, string) {
	input, _ := vars["input"].(map[string]any)
	repoID := stringVar(input, "repositoryId")
	repo, ok := strings.CutPrefix(repoID, "R_")
	if !ok {
		return nil, fmt.Sprintf("Could not resolve to a node with the global id of '%s'", repoID)
	}
	pr := PullRequest{Repo: repo, Title: stringVar(input, "title"), Body: stringVar(input, "body"),
		Head: stringVar(input, "headRefName"), Base: stringVar(input, "baseRefName")}
	g.mu.Lock()
	has := g.branches
	g.mu.Unlock()
	if has != nil && !has(repo, pr.Head) {
		return nil, fmt.Sprintf("Head sha can't be blank, No commits between %s and %s, Head ref must be a branch", pr.Base, pr.Head)
	}
	g.mu.Lock()
	pr.Number = len(g.issues) + len(g.pulls) + 1
	g.pulls = append(g.pulls, pr)
	g.mu.Unlock()
	return map[string]any{"createPullRequest": map[string]any{"pullRequest": g.pullJSON(pr)}}, ""
}

// pullsForBranch answers PullRequestForBranch: the open pull requests
// whose head is the branch.
func (g *GitHub) pullsForBranch(vars map[string]any) (map[string]any, string) {
	owner, name := stringVar(vars, "owner"), stringVar(vars, "repo", "name")
	head := stringVar(vars, "headRefName")
	nodes := []any{}
	for _, pr := range g.PullRequests() {
		if pr.Repo == owner+"/"+name && pr.Head == head {
			nodes = append(nodes, g.pullJSON(pr))
		}
	}
	repo := g.repository(owner, name)
	repo["pullRequests"] = map[string]any{"nodes": nodes}
	return map[string]any{"repository": repo}, ""
}

func (g *GitHub) pullJSON(pr PullRequest) map[string]any {
	owner, _, _ := strings.Cut(pr.Repo, "/")
	return map[string]any{
		"id":                  fmt.Sprintf("PR_%s/%d", pr.Repo, pr.Number),
		"number":              pr.Number,
		"url":                 fmt.Sprintf("%s/%s/pull/%d", g.URL, pr.Repo, pr.Number),
		"state":               "OPEN",
		"title":               pr.Title,
		"baseRefName":         pr.Base,
		"headRefName":         pr.Head,
		"isCrossRepository":   false,
		"headRepositoryOwner": map[string]any{"id": "U_" + owner, "login": owner},
	}
}
