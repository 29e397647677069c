package standin

import (
	"crypto/subtle"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

// ServeGit makes g serve git's smart HTTP too, as GitHub does: the
// repositories named ("owner/name", created empty) at /owner/name.git
// and /owner/name,
// to an installation token of that repository alone as the Basic auth
// password (any user name), with contents: read to fetch and write to
// push, or to the user's token (g.Token, as a personal access token);
// anything else is answered 401. Each git request is recorded in
// Requests as "GIT <method> <path> token-repo=<repo>" (or "401 GIT …").
func (g *GitHub) ServeGit(t testing.TB, repos ...string) *Git {
	t.Helper()
	gt, backend := newGit(t, GitOptions{Repos: repos})
	gt.Server = g.Server
	g.mu.Lock()
	g.gitBackend = backend
	g.mu.Unlock()
	return gt
}

// serveGit serves one git request, if g serves git and r is one (not
// the API's); false when it is not.
func (g *GitHub) serveGit(w http.ResponseWriter, r *http.Request) bool {
	g.mu.Lock()
	backend := g.gitBackend
	g.mu.Unlock()
	if backend == nil || strings.HasPrefix(r.URL.Path, "/api/") {
		return false
	}
	line := "GIT " + r.Method + " " + r.URL.Path
	// /owner/name[.git]/rest, as GitHub takes it; the backend's path has .git.
	parts := strings.SplitN(strings.TrimPrefix(r.URL.Path, "/"), "/", 3)
	ok := len(parts) == 3
	repo := ""
	if ok {
		repo = parts[0] + "/" + strings.TrimSuffix(parts[1], ".git")
		r.URL.Path = "/" + repo + ".git/" + parts[2]
	}
	tok, authorised := g.gitToken(r)
	if _, pass, ok := r.BasicAuth(); ok && subtle.ConstantTimeCompare([]byte(pass), []byte(g.Token)) == 1 {
		// The user's own token, as a personal access token: every repository.
		tok, authorised = InstallationToken{Repo: repo, Permissions: map[string]string{"contents": "write"}}, true
	}
	need := "read"
	if isPush(r) {
		need = "write"
	}
	if !ok || !authorised || !strings.EqualFold(tok.Repo, repo) || (tok.Permissions["contents"] != need && tok.Permissions["contents"] != "write") {
		g.record("401 " + line)
		w.Header().Set("WWW-Authenticate", `Basic realm="GitHub"`)
		http.Error(w, "Invalid username or token.", http.StatusUnauthorized)
		return true
	}
	g.record(fmt.Sprintf("%s token-repo=%s", line, tok.Repo))
	backend(w, r, "x-access-token")
	return true
}

// gitToken is the live installation token r's Basic auth password is.
func (g *GitHub) gitToken(r *http.Request) (InstallationToken, bool) {
	_, pass, ok := r.BasicAuth()
	if !ok {
		return InstallationToken{}, false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	tok := g.tokens[pass]
	if tok == nil || tok.Revoked || !time.Now().Before(tok.Expires) {
		return InstallationToken{}, false
	}
	return *tok, true
}
