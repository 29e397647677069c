package main

import (
	"encoding/base64"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"coily.dev/coily/internal/canary"
	"coily.dev/coily/internal/standin"
)

// TestGitProxyGitHubApp: a remote whose credential is a GitHub App, its
// private key in the credentials file (base64, one line), against the
// GitHub stand-in as both the API and the git upstream. The agent clones
// and pushes through the real server; each request to upstream mints a
// token of that one repository (read, then write for the push), revoked
// once done; neither the key nor a token reaches the agent, the log, the
// audit or the state directory.
func TestGitProxyGitHubApp(t *testing.T) {
	standin.Need(t, "git", standin.GitHint)
	gh := standin.GitHubEnterprise(t, "user-token-3b7e", "localhost")
	app := gh.InstallApp(t, standin.AppOptions{ID: 5150, Installation: 31, Owner: "owner", Repos: []string{"ghapp"},
		Permissions: map[string]string{"contents": "write"}})
	up := gh.ServeGit(t, "owner/ghapp")
	seed := filepath.Join(t.TempDir(), "seed")
	gitOut(t, "init", "--quiet", "--initial-branch=main", seed)
	gitOut(t, "-C", seed, "commit", "--quiet", "--allow-empty", "-m", "first")
	gitOut(t, "-C", seed, "push", "--quiet", up.Dir("owner/ghapp"), "main")
	host := "localhost:" + gh.Port
	key := base64.StdEncoding.EncodeToString(app.PEM)
	// More remotes of gitProxyPolicy's list.
	remotes := fmt.Sprintf(`    - name: gh
      url: https://%[1]s/owner/*
      roles: [operator]
      github_app: {app_id: 5150, installation_id: 31, private_key: file:ghappkey, api_url: https://%[1]s/api/v3}
      ca_file: %[2]s
      allow_cidrs: [127.0.0.0/8, "::1/128"]
      push: {refs: ["refs/heads/agent/*"], create: allow, fast_forward: allow}
`, host, gh.CAFile)
	e := startGitProxy(t, remotes, "ghappkey="+key)
	c := canary.New(t)
	c.AddString("App private key", key)
	c.AddString("App private key (PEM)", string(app.PEM))
	work := t.TempDir()
	if r := runCoilyGit(t, work, e.agentEnv(), "git", "setup", "--global", "--host", host); r.code != 0 {
		t.Fatalf("git setup: %+v", r)
	}
	clone := filepath.Join(work, "ghapp")
	e.agent(true, work, "git", "clone", "--quiet", "https://"+host+"/owner/ghapp.git", clone)
	e.agent(true, clone, "git", "checkout", "--quiet", "-b", "agent/x")
	e.agent(true, clone, "git", "commit", "--quiet", "--allow-empty", "-m", "agent work")
	want := strings.TrimSpace(e.agent(true, clone, "git", "rev-parse", "HEAD"))
	e.agent(true, clone, "git", "push", "--quiet", "origin", "agent/x")
	if got := up.Ref(t, "owner/ghapp", "refs/heads/agent/x"); got != want {
		t.Fatalf("upstream's agent/x is %q, want %s\nserver:\n%s", got, want, e.log)
	}
	asked := gh.TokenRequests()
	var perms []string
	for _, r := range asked {
		if r.Status != 201 || !slices.Equal(r.Repositories, []string{"ghapp"}) || len(r.Permissions) != 1 {
			t.Errorf("token request %+v: want repositories [ghapp], contents only", r)
		}
		perms = append(perms, r.Permissions["contents"])
		if tok, ok := gh.InstallationToken(r.Token); !ok || !tok.Revoked {
			t.Errorf("token (contents %s) not revoked", r.Permissions["contents"])
		}
		c.AddString("installation token", r.Token)
	}
	if !slices.Contains(perms, "read") || perms[len(perms)-1] != "write" {
		t.Errorf("tokens' contents permissions %q: want reads, then the push's write", perms)
	}
	if pushes := e.gitRecords("git.push"); len(pushes) == 0 || pushes[len(pushes)-1].Details["remote"] != "gh" || pushes[len(pushes)-1].Decision != "allow" {
		t.Fatalf("the push's record: %+v", pushes)
	}
	c.CheckText("the agent's outputs", e.outputs...)
	c.CheckText("the server's log", e.log.String())
	c.CheckFiles(work, e.home, filepath.Join(e.dir, "git"), filepath.Join(e.dir, "audit"))
}
