package standin

import (
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// GitHubHint says how to install gh.
const GitHubHint = "install the Debian package gh (scripts/test.sh does)"

// GitHub is a local HTTPS stand-in for a GitHub Enterprise host, enough
// for `gh issue create`, `gh issue view`, `gh pr create` (gh 2.23,
// pulls.go) and `gh release upload` (githubrelease.go): gh reaches it
// with Env(). Every repository owner/name exists
// and has issues enabled. It also mints GitHub App installation tokens (githubapp.go), which reach
// only their repository, and with ServeGit serves git to them (githubgit.go).
type GitHub struct {
	*Server
	Token string // the token it accepts: Authorization "token T" or "Bearer T"
	Login string // the user the token belongs to

	mu       sync.Mutex
	issues   []Issue
	pulls    []PullRequest
	branches func(repo, branch string) bool // SetBranches
	requests []string
	releases []string // "owner/name@tag", a release's id its index + 1
	assets   []Asset
	apps     map[int64]*App                // by installation id
	tokens   map[string]*InstallationToken // by value
	asked    []TokenRequest
	// gitBackend serves git's smart HTTP (ServeGit); nil for none.
	gitBackend func(w http.ResponseWriter, r *http.Request, user string)
}

// Issue is an issue created through the stand-in.
type Issue struct {
	Repo   string // "owner/name"
	Number int
	Title  string
	Body   string
}

// GitHubEnterprise starts a GitHub Enterprise stand-in for t that accepts
// token, with a certificate also valid for hosts.
func GitHubEnterprise(t testing.TB, token string, hosts ...string) *GitHub {
	t.Helper()
	ca := TLS(t)
	g := &GitHub{Token: token, Login: "standin-user"}
	// The handler quotes the server's own URL: it waits until g.Server is
	// set (a request can arrive as soon as the listener serves).
	ready := make(chan struct{})
	h := g.handler(t)
	g.Server = ca.Serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-ready
		h.ServeHTTP(w, r)
	}), hosts...)
	close(ready)
	return g
}

// Env returns the environment that points gh at the stand-in: GH_HOST,
// GH_ENTERPRISE_TOKEN, SSL_CERT_FILE, and a fresh GH_CONFIG_DIR so that no
// user configuration applies.
func (g *GitHub) Env(t testing.TB) []string {
	return []string{
		"GH_HOST=" + g.Host,
		"GH_ENTERPRISE_TOKEN=" + g.Token,
		"SSL_CERT_FILE=" + g.CAFile,
		"GH_CONFIG_DIR=" + t.TempDir(),
		"GH_PROMPT_DISABLED=1",
		"GH_NO_UPDATE_NOTIFIER=1",
		"NO_COLOR=1",
	}
}

// Issues returns the issues created so far.
func (g *GitHub) Issues() []Issue {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]Issue(nil), g.issues...)
}

// Requests returns one line per request served, in order: "POST
// /api/graphql query RepositoryInfo", "GET /api/v3/user", and "401 …" for
// refused ones.
func (g *GitHub) Requests() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]string(nil), g.requests...)
}

func (g *GitHub) record(line string) {
	g.mu.Lock()
	g.requests = append(g.requests, line)
	g.mu.Unlock()
}

func (g *GitHub) handler(t testing.TB) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		line := r.Method + " " + r.URL.Path
		if g.serveGit(w, r) {
			return
		}
		if r.Method == http.MethodPost && strings.HasPrefix(r.URL.Path, "/api/v3/app/installations/") {
			g.mintToken(w, r, line) // authenticated by the App's JWT
			return
		}
		who, ok := g.identify(r)
		if !ok {
			g.record("401 " + line)
			writeJSON(w, http.StatusUnauthorized, map[string]string{"message": "Bad credentials"})
			return
		}
		if r.URL.Path == "/api/graphql" && r.Method == http.MethodPost {
			g.graphql(t, w, r, line, who)
			return
		}
		if r.Method == http.MethodDelete && r.URL.Path == "/api/v3/installation/token" {
			g.revokeToken(w, line, who)
			return
		}
		if who != nil && r.URL.Path == "/api/v3/user" {
			g.record("403 " + line)
			writeJSON(w, http.StatusForbidden, map[string]string{"message": "Resource not accessible by integration"})
			return
		}
		g.record(line)
		g.rest(t, w, r)
	})
}

// identify reports who r's token belongs to: the user (nil), or a live
// installation token; ok false for no token, a wrong one, or an
// installation token revoked or expired.
func (g *GitHub) identify(r *http.Request) (who *InstallationToken, ok bool) {
	h := r.Header.Get("Authorization")
	for _, scheme := range []string{"token ", "Bearer ", "bearer "} {
		got, found := strings.CutPrefix(h, scheme)
		if !found {
			continue
		}
		if subtle.ConstantTimeCompare([]byte(got), []byte(g.Token)) == 1 {
			return nil, true
		}
		g.mu.Lock()
		defer g.mu.Unlock()
		tok := g.tokens[got]
		if tok == nil || tok.Revoked || !time.Now().Before(tok.Expires) {
			return nil, false
		}
		return tok, true
	}
	return nil, false
}

func (g *GitHub) rest(t testing.TB, w http.ResponseWriter, r *http.Request) {
	path := strings.TrimSuffix(strings.TrimPrefix(r.URL.Path, "/api/v3"), "/")
	if g.release(w, r, path) {
		return
	}
	switch {
	case path == "":
		writeJSON(w, http.StatusOK, map[string]string{"current_user_url": g.URL + "/api/v3/user"})
	case path == "/user":
		writeJSON(w, http.StatusOK, map[string]any{"login": g.Login, "id": 1, "type": "User"})
	default:
		t.Logf("standin github: unanswered %s %s", r.Method, r.URL.Path)
		writeJSON(w, http.StatusNotFound, map[string]string{"message": "Not Found (standin)"})
	}
}

// graphQLRequest is the body of a POST /api/graphql.
type graphQLRequest struct {
	Query     string         `json:"query"`
	Variables map[string]any `json:"variables"`
}

func (g *GitHub) graphql(t testing.TB, w http.ResponseWriter, r *http.Request, line string, who *InstallationToken) {
	var req graphQLRequest
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&req); err != nil {
		g.record(line + " (bad JSON)")
		writeJSON(w, http.StatusBadRequest, map[string]string{"message": "Problems parsing JSON"})
		return
	}
	kind, name := operationName(req.Query)
	line = strings.TrimSpace(line + " " + kind + " " + name)
	if data, refused := g.refuseFor(who, req, kind); refused != nil {
		g.record(line + " -> " + refused["type"].(string) + ": " + refused["message"].(string))
		writeJSON(w, http.StatusOK, map[string]any{"data": data, "errors": []map[string]any{refused}})
		return
	}
	g.record(line)
	data, gqlErr := g.answer(req, kind, name)
	if gqlErr != "" {
		if data == nil {
			t.Logf("standin github: %s", gqlErr)
		}
		writeJSON(w, http.StatusOK, map[string]any{"data": data, "errors": []map[string]any{{"message": gqlErr, "type": "NOT_FOUND"}}})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"data": data})
}

// answer returns the data for one GraphQL operation, matched by name and,
// failing that, by what the document asks for; or an error message.
func (g *GitHub) answer(req graphQLRequest, kind, name string) (map[string]any, string) {
	q := req.Query
	switch {
	case kind == "mutation" && strings.Contains(q, "createIssue"):
		return g.createIssue(req.Variables)
	case kind == "mutation" && strings.Contains(q, "createPullRequest"):
		return g.createPullRequest(req.Variables)
	case name == "PullRequestForBranch" || strings.Contains(q, "pullRequests("):
		return g.pullsForBranch(req.Variables)
	case strings.Contains(q, "__type("):
		return map[string]any{"Issue": issueType()}, ""
	case name == "IssueByNumber" || strings.Contains(q, "issueOrPullRequest("):
		return g.issueByNumber(req.Variables)
	case name == "RepositoryReleaseByTag": // a draft's tag (githubrelease.go): none is a draft
		return map[string]any{"repository": map[string]any{"release": nil}}, ""
	case name == "RepositoryInfo" || strings.Contains(q, "repository("):
		owner, repo := stringVar(req.Variables, "owner"), stringVar(req.Variables, "name", "repo")
		return map[string]any{"repository": g.repository(owner, repo)}, ""
	case strings.Contains(q, "viewer"):
		return map[string]any{"viewer": map[string]any{"login": g.Login, "id": "U_1"}}, ""
	}
	return nil, fmt.Sprintf("standin: unanswered %s %q", kind, name)
}

func (g *GitHub) repository(owner, name string) map[string]any {
	return map[string]any{
		"id":                 "R_" + owner + "/" + name,
		"name":               name,
		"nameWithOwner":      owner + "/" + name,
		"owner":              map[string]any{"login": owner},
		"url":                g.URL + "/" + owner + "/" + name,
		"hasIssuesEnabled":   true,
		"hasWikiEnabled":     false,
		"description":        "",
		"viewerPermission":   "ADMIN",
		"defaultBranchRef":   map[string]any{"name": "main"},
		"parent":             nil,
		"isPrivate":          false,
		"mergeCommitAllowed": true,
		"rebaseMergeAllowed": true,
		"squashMergeAllowed": true,
	}
}

// createIssue records the issue of a createIssue mutation. gh sends its
// fields as variables.input.
func (g *GitHub) createIssue(vars map[string]any) (map[string]any, string) {
	input, _ := vars["input"].(map[string]any)
	repoID := stringVar(input, "repositoryId")
	repo, ok := strings.CutPrefix(repoID, "R_")
	if !ok {
		return nil, fmt.Sprintf("Could not resolve to a node with the global id of '%s'", repoID)
	}
	g.mu.Lock()
	number := len(g.issues) + 1
	is := Issue{Repo: repo, Number: number, Title: stringVar(input, "title"), Body: stringVar(input, "body")}
	g.issues = append(g.issues, is)
	g.mu.Unlock()
	return map[string]any{"createIssue": map[string]any{"issue": g.issueJSON(is)}}, ""
}

func (g *GitHub) issueByNumber(vars map[string]any) (map[string]any, string) {
	repo := stringVar(vars, "owner") + "/" + stringVar(vars, "repo", "name")
	number, _ := vars["number"].(float64)
	for _, is := range g.Issues() {
		if is.Repo == repo && float64(is.Number) == number {
			return map[string]any{"repository": map[string]any{"hasIssuesEnabled": true, "issue": g.issueJSON(is)}}, ""
		}
	}
	msg := fmt.Sprintf("Could not resolve to an issue or pull request with the number of %v.", number)
	return map[string]any{"repository": map[string]any{"hasIssuesEnabled": true, "issue": nil}}, msg
}

// issueJSON answers every issue field gh 2.23 asks for.
func (g *GitHub) issueJSON(is Issue) map[string]any {
	none := map[string]any{"nodes": []any{}, "totalCount": 0}
	return map[string]any{
		"__typename":     "Issue",
		"id":             fmt.Sprintf("I_%s/%d", is.Repo, is.Number),
		"number":         is.Number,
		"url":            fmt.Sprintf("%s/%s/issues/%d", g.URL, is.Repo, is.Number),
		"state":          "OPEN",
		"createdAt":      time.Now().UTC().Format(time.RFC3339),
		"title":          is.Title,
		"body":           is.Body,
		"author":         map[string]any{"login": g.Login, "id": "U_1", "name": "Standin User"},
		"milestone":      nil,
		"assignees":      none,
		"labels":         none,
		"projectCards":   none,
		"reactionGroups": []any{},
		"comments":       none,
	}
}

// issueType answers gh's feature detection (`__type(name: "Issue")`).
func issueType() map[string]any {
	var fields []map[string]string
	for _, f := range []string{"id", "number", "title", "body", "state", "url", "author", "createdAt"} {
		fields = append(fields, map[string]string{"name": f})
	}
	return map[string]any{"fields": fields}
}

// stringVar returns the first of keys that vars holds as a string.
func stringVar(vars map[string]any, keys ...string) string {
	for _, k := range keys {
		if s, ok := vars[k].(string); ok {
			return s
		}
	}
	return ""
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
