package standin

import (
	"bytes"
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"
)

// signJWT signs claims with key (RS256), or with alg as given.
func signJWT(t *testing.T, key *rsa.PrivateKey, alg string, claims map[string]any) string {
	t.Helper()
	h, _ := json.Marshal(map[string]string{"alg": alg, "typ": "JWT"})
	c, _ := json.Marshal(claims)
	enc := base64.RawURLEncoding
	signing := enc.EncodeToString(h) + "." + enc.EncodeToString(c)
	sum := sha256.Sum256([]byte(signing))
	sig, err := rsa.SignPKCS1v15(rand.Reader, key, crypto.SHA256, sum[:])
	if err != nil {
		t.Fatal(err)
	}
	return signing + "." + enc.EncodeToString(sig)
}

func appClaims(app *App, now time.Time) map[string]any {
	return map[string]any{"iat": now.Add(-time.Minute).Unix(), "exp": now.Add(9 * time.Minute).Unix(), "iss": app.ID}
}

// askToken posts a token request and returns the status and answer.
func askToken(t *testing.T, g *GitHub, installation string, jwt string, body any) (int, map[string]any) {
	t.Helper()
	data, _ := json.Marshal(body)
	req, _ := http.NewRequest(http.MethodPost, g.URL+"/api/v3/app/installations/"+installation+"/access_tokens", bytes.NewReader(data))
	req.Header.Set("Authorization", "Bearer "+jwt)
	resp, err := caClient(t, g).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, out
}

// caClient trusts the stand-in's CA alone.
func caClient(t *testing.T, g *GitHub) *http.Client {
	t.Helper()
	pemCA, err := os.ReadFile(g.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pemCA)
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	tr.Proxy = nil
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

func newAppStandin(t *testing.T) (*GitHub, *App) {
	g := GitHubEnterprise(t, "user-token-1")
	app := g.InstallApp(t, AppOptions{ID: 123, Installation: 456, Owner: "alice", Repos: []string{"repo", "other"},
		Permissions: map[string]string{"issues": "write", "contents": "read"}})
	return g, app
}

// The stand-in mints a token only for the App's JWT (RS256 with its key,
// iss its id, iat not ahead, exp at most 10 minutes ahead), and only for
// what the installation covers.
func TestGitHubAppTokenEndpoint(t *testing.T) {
	g, app := newAppStandin(t)
	now := time.Now()
	good := signJWT(t, app.Key, "RS256", appClaims(app, now))
	want := map[string]any{"repositories": []string{"repo"}, "permissions": map[string]string{"issues": "write"}}
	status, ans := askToken(t, g, "456", good, want)
	if status != http.StatusCreated {
		t.Fatalf("status %d: %v", status, ans)
	}
	tok, _ := ans["token"].(string)
	rec, ok := g.InstallationToken(tok)
	if !ok || rec.Repo != "alice/repo" || rec.Permissions["issues"] != "write" || rec.Permissions["metadata"] != "read" || len(rec.Permissions) != 2 {
		t.Fatalf("token %+v (answer %v)", rec, ans)
	}
	if exp, _ := time.Parse(time.RFC3339, ans["expires_at"].(string)); exp.Sub(now) > time.Hour+time.Second || exp.Before(now.Add(59*time.Minute)) {
		t.Errorf("expires_at %v", ans["expires_at"])
	}
	reqs := g.TokenRequests()
	if len(reqs) != 1 || reqs[0].Issuer != "123" || reqs[0].IssuedAt.Unix() != now.Add(-time.Minute).Unix() || reqs[0].Token != tok {
		t.Fatalf("requests %+v", reqs)
	}

	other, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		inst   string
		jwt    string
		body   any
		status int
	}{
		"another key":        {"456", signJWT(t, other, "RS256", appClaims(app, now)), want, 401},
		"alg none":           {"456", strings.Join(strings.Split(signJWT(t, app.Key, "none", appClaims(app, now)), ".")[:2], ".") + ".", want, 401},
		"alg HS256":          {"456", signJWT(t, app.Key, "HS256", appClaims(app, now)), want, 401},
		"another iss":        {"456", signJWT(t, app.Key, "RS256", map[string]any{"iat": now.Unix() - 60, "exp": now.Unix() + 500, "iss": 124}), want, 401},
		"exp too far":        {"456", signJWT(t, app.Key, "RS256", map[string]any{"iat": now.Unix() - 60, "exp": now.Unix() + 660, "iss": 123}), want, 401},
		"expired":            {"456", signJWT(t, app.Key, "RS256", map[string]any{"iat": now.Unix() - 700, "exp": now.Unix() - 1, "iss": 123}), want, 401},
		"iat ahead":          {"456", signJWT(t, app.Key, "RS256", map[string]any{"iat": now.Unix() + 60, "exp": now.Unix() + 500, "iss": 123}), want, 401},
		"no claims":          {"456", signJWT(t, app.Key, "RS256", map[string]any{}), want, 401},
		"garbage":            {"456", "x.y.z", want, 401},
		"bad signature":      {"456", good[:len(good)-4] + "AAAA", want, 401},
		"unknown install":    {"457", good, want, 404},
		"repo not installed": {"456", good, map[string]any{"repositories": []string{"secret"}, "permissions": map[string]string{"issues": "write"}}, 422},
		"more than allowed":  {"456", good, map[string]any{"repositories": []string{"repo"}, "permissions": map[string]string{"contents": "write"}}, 422},
		"not installed perm": {"456", good, map[string]any{"repositories": []string{"repo"}, "permissions": map[string]string{"actions": "read"}}, 422},
		"bad level":          {"456", good, map[string]any{"repositories": []string{"repo"}, "permissions": map[string]string{"issues": "admin"}}, 422},
	} {
		if status, ans := askToken(t, g, tc.inst, tc.jwt, tc.body); status != tc.status || ans["token"] != nil {
			t.Errorf("%s: status %d (%v), want %d", name, status, ans, tc.status)
		}
	}
}

// gh with an installation token: issues of its repository only; after
// revocation, nothing.
func TestGitHubAppTokenWithGH(t *testing.T) {
	Need(t, "gh", GitHubHint)
	g, app := newAppStandin(t)
	_, ans := askToken(t, g, "456", signJWT(t, app.Key, "RS256", appClaims(app, time.Now())),
		map[string]any{"repositories": []string{"repo"}, "permissions": map[string]string{"issues": "write"}})
	tok, _ := ans["token"].(string)
	env := append(g.Env(t), "GH_ENTERPRISE_TOKEN="+tok)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("requests: %q", g.Requests())
		}
	})
	out := run(t, "", env, "gh", "issue", "create", "-R", g.Host+"/alice/repo", "--title", "by the app", "--body", "b")
	if !strings.Contains(out, "/alice/repo/issues/1") {
		t.Fatalf("gh issue create printed %q", out)
	}
	// Another repository of the same installation: the token cannot see it.
	out, err := tryRun(t, "", env, "gh", "issue", "create", "-R", g.Host+"/alice/other", "--title", "x", "--body", "y")
	if err == nil || len(g.Issues()) != 1 {
		t.Fatalf("an issue on another repository with the token: %v %q", err, out)
	}
	t.Logf("gh on another repository: %s", strings.TrimSpace(out))
	if !strings.Contains(strings.Join(g.Requests(), "\n"), "NOT_FOUND: Could not resolve to a Repository with the name 'alice/other'.") {
		t.Errorf("the stand-in did not refuse the other repository: %q", g.Requests())
	}

	// The mutation itself, sent straight: refused for another repository.
	body, _ := json.Marshal(map[string]any{"query": "mutation IssueCreate($input: CreateIssueInput!) { createIssue(input: $input) { issue { url } } }",
		"variables": map[string]any{"input": map[string]any{"repositoryId": "R_alice/other", "title": "x"}}})
	gq, _ := http.NewRequest(http.MethodPost, g.URL+"/api/graphql", bytes.NewReader(body))
	gq.Header.Set("Authorization", "bearer "+tok)
	resp, err := caClient(t, g).Do(gq)
	if err != nil {
		t.Fatal(err)
	}
	var gqAns struct {
		Errors []struct{ Type string } `json:"errors"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&gqAns)
	resp.Body.Close()
	if len(gqAns.Errors) != 1 || gqAns.Errors[0].Type != "FORBIDDEN" || len(g.Issues()) != 1 {
		t.Fatalf("createIssue on another repository: %+v", gqAns)
	}

	req, _ := http.NewRequest(http.MethodDelete, g.URL+"/api/v3/installation/token", nil)
	req.Header.Set("Authorization", "token "+tok)
	resp, err = caClient(t, g).Do(req)
	if err != nil || resp.StatusCode != http.StatusNoContent {
		t.Fatalf("revoke: %v %v", resp, err)
	}
	resp.Body.Close()
	if rec, _ := g.InstallationToken(tok); !rec.Revoked {
		t.Fatal("the token is not revoked")
	}
	if out, err := tryRun(t, "", env, "gh", "issue", "create", "-R", g.Host+"/alice/repo", "--title", "x", "--body", "y"); err == nil {
		t.Fatalf("gh with a revoked token: %s", out)
	}
	if n := len(g.Issues()); n != 1 {
		t.Fatalf("%d issues", n)
	}
}
