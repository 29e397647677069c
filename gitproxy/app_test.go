package gitproxy

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"coily.dev/coily/internal/canary"
	"coily.dev/coily/internal/standin"
	"coily.dev/coily/internal/testlog"
	"coily.dev/coily/keystore"
)

// appEnv is env with a second upstream: the GitHub stand-in, serving git
// to its App's installation tokens alone, behind a remote whose
// credential is that App (github_app).
type appEnv struct {
	*env
	gh     *standin.GitHub
	git    *standin.Git
	ghHost string // localhost:PORT
	log    *testlog.Buffer
}

// newAppEnv's extra is what the stand-in grants beyond what is asked.
func newAppEnv(t *testing.T, extra map[string]string) *appEnv {
	t.Helper()
	gh := standin.GitHubEnterprise(t, "user-token-9c1d", "localhost")
	app := gh.InstallApp(t, standin.AppOptions{ID: 4242, Installation: 77, Owner: "owner", Repos: []string{"app", "other"},
		Permissions: map[string]string{"contents": "write"}, GrantExtra: extra})
	a := &appEnv{gh: gh, git: gh.ServeGit(t, "owner/app", "owner/other"), ghHost: "localhost:" + gh.Port, log: new(testlog.Buffer)}
	tail := fmt.Sprintf(`    - name: gh
      url: https://%[1]s/owner/*
      roles: [agent]
      github_app: {app_id: 4242, installation_id: 77, private_key: file:ghapp-key, api_url: https://%[1]s/api/v3}
      ca_file: %[2]s
      allow_cidrs: [127.0.0.0/8, "::1/128"]
      push: {refs: ["refs/heads/agent/*"], create: allow, fast_forward: allow}
`, a.ghHost, gh.CAFile)
	a.env = newEnv(t, tail, func(c *Config) {
		c.Keystore = appKeystore{pem: string(app.PEM)}
		c.Log = slog.New(slog.NewTextHandler(a.log, nil))
	})
	work := filepath.Join(t.TempDir(), "seed")
	a.env.git("", "init", "--quiet", "--initial-branch=main", work)
	a.env.commit(work, "README", "first")
	a.env.git(work, "push", "--quiet", a.git.Dir("owner/app"), "main")
	return a
}

func (a *appEnv) url(repo string) string { return a.srv.URL + "/git/" + a.ghHost + "/" + repo }

// appKeystore holds the App's private key under ghapp-key.
type appKeystore struct{ pem string }

func (k appKeystore) Fetch(_ context.Context, refs map[string]keystore.Ref) (*keystore.Set, error) {
	out := &keystore.Set{Values: map[string]string{}}
	for name, ref := range refs {
		if ref.Path != "ghapp-key" {
			return nil, fmt.Errorf("no credential %s", ref)
		}
		out.Values[name] = k.pem
	}
	return out, nil
}

// A remote whose credential is a GitHub App: each request to upstream
// mints a token of the request's repository alone (contents: read to
// fetch, write to push), sends it as x-access-token, and revokes it when
// the request is done; a clone and a push succeed; a repository the
// remote does not name never mints; no token shows anywhere.
func TestGitHubAppRemote(t *testing.T) {
	a := newAppEnv(t, nil)
	work := filepath.Join(t.TempDir(), "w")
	a.env.git("", "clone", "--quiet", a.url("owner/app"), work)
	a.env.git(work, "checkout", "--quiet", "-b", "agent/x")
	head := a.env.commit(work, "b", "agent work")
	pushed := a.env.git(work, "push", "origin", "agent/x")
	if got := a.git.Ref(t, "owner/app", "refs/heads/agent/x"); got != head {
		t.Fatalf("upstream's agent/x is %q, want %s\n%s", got, head, pushed)
	}
	asked := a.gh.TokenRequests()
	var perms []string
	c := canary.New(t)
	for _, r := range asked {
		if r.Installation != 77 || r.Issuer != "4242" || !slices.Equal(r.Repositories, []string{"app"}) || len(r.Permissions) != 1 || r.Status != 201 {
			t.Fatalf("token request %+v: want installation 77, App 4242, repositories [app], contents only", r)
		}
		perms = append(perms, r.Permissions["contents"])
		tok, ok := a.gh.InstallationToken(r.Token)
		if !ok || !tok.Revoked {
			t.Errorf("token for %s (contents %s) not revoked: %+v", tok.Repo, r.Permissions["contents"], tok)
		}
		c.AddString("installation token", r.Token)
	}
	// The clone's advertisement, then the push (whose advertisement and
	// refresh found the cache fresh: no token).
	if want := []string{"read", "write"}; !slices.Equal(perms, want) {
		t.Errorf("tokens' contents permissions %q, want %q", perms, want)
	}
	if got := a.lastPush().Lists["github_app_tokens"]; len(got) != 1 || !strings.HasPrefix(got[0], "owner/app ") ||
		!strings.Contains(got[0], "contents:write") || !strings.HasSuffix(got[0], " revoked") {
		t.Errorf("the push's record lists the tokens minted for it as %q", got)
	}
	if gits := a.gitRequests(); len(gits) == 0 || slices.ContainsFunc(gits, func(l string) bool { return !strings.HasSuffix(l, "token-repo=owner/app") }) {
		t.Errorf("upstream's git requests: %q", gits)
	}

	// Another repository of the installation, outside the remote's
	// pattern: refused before anything is minted.
	out, err := a.env.try("", "ls-remote", a.srv.URL+"/git/"+a.ghHost+"/stranger/app")
	if err == nil || !strings.Contains(out, "policy-deny") {
		t.Fatalf("a repository the remote does not name: %v\n%s", err, out)
	}
	if n := len(a.gh.TokenRequests()); n != len(asked) {
		t.Fatalf("a refused request minted a token: %d requests, was %d", n, len(asked))
	}
	a.rec.mu.Lock()
	records, _ := json.Marshal(a.rec.all)
	a.rec.mu.Unlock()
	c.CheckText("the audit, the proxy's log and the agent's git", string(records), a.log.String(), pushed, out)
}

// A token GitHub grants beyond what was asked (another permission) is
// revoked at once and never sent upstream: the request is refused,
// credential-unavailable.
func TestGitHubAppRemoteWiderTokenRefused(t *testing.T) {
	a := newAppEnv(t, map[string]string{"administration": "write"})
	out, err := a.env.try("", "ls-remote", a.url("owner/app"))
	if err == nil || !strings.Contains(out, "credential-unavailable") {
		t.Fatalf("a wider token: %v\n%s", err, out)
	}
	asked := a.gh.TokenRequests()
	if len(asked) != 1 {
		t.Fatalf("token requests: %+v", asked)
	}
	if tok, ok := a.gh.InstallationToken(asked[0].Token); !ok || !tok.Revoked {
		t.Errorf("the wider token is not revoked: %+v", tok)
	}
	if gits := a.gitRequests(); len(gits) != 0 {
		t.Errorf("upstream was reached: %q", gits)
	}
	c := canary.New(t)
	c.AddString("installation token", asked[0].Token)
	c.CheckText("the proxy's log and the agent's git", a.log.String(), out)
}

// gitRequests are upstream's git requests served.
func (a *appEnv) gitRequests() []string {
	var out []string
	for _, l := range a.gh.Requests() {
		if strings.HasPrefix(l, "GIT ") {
			out = append(out, l)
		}
	}
	return out
}
