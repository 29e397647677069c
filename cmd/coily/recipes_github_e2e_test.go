package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"coily.dev/coily/internal/testserver"

	"go.yaml.in/yaml/v3"

	"coily.dev/coily/internal/standin"
	"coily.dev/coily/internal/vaulttest"
)

// The recipes of docs/credentials.md for GitHub ("gh with a token in
// Vault", "git over https", "GitHub App tokens per exec") run end to end
// with the real gh and git, the Vault commands, Vault policy and rule
// taken from the page.

// recipeRule is the one rule of a recipe's rule block.
func recipeRule(t *testing.T, name string) map[string]any {
	t.Helper()
	var rules []map[string]any
	if err := yaml.Unmarshal([]byte(recipeBlock(t, name)), &rules); err != nil || len(rules) != 1 {
		t.Fatalf("the rule of %s: %v (%d rules)", name, err, len(rules))
	}
	return rules[0]
}

// writeRecipePolicy writes a policy of rules that the local operator may
// run, with the workspaces.
func writeRecipePolicy(t *testing.T, dir string, workspaces map[string]any, rules ...map[string]any) string {
	t.Helper()
	var names, cmds []any
	for _, r := range rules {
		names, cmds = append(names, r["name"]), append(cmds, r)
	}
	doc := map[string]any{"version": 1, "commands": cmds,
		"roles": map[string]any{"operator": map[string]any{"permissions": []any{"exec", "status"}, "commands": names}}}
	if workspaces != nil {
		doc["workspaces"] = workspaces
	}
	out, err := yaml.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return writePolicy(t, dir, string(out))
}

// renameCredential gives a rule's credential another variable (gh reads
// GH_ENTERPRISE_TOKEN for an Enterprise host such as the stand-in).
func renameCredential(t *testing.T, rule map[string]any, from, to string) {
	t.Helper()
	creds, _ := rule["credentials"].(map[string]any)
	ref, ok := creds[from]
	if !ok {
		t.Fatalf("rule %s has no credential %s", rule["name"], from)
	}
	delete(creds, from)
	creds[to] = ref
}

// TestRecipeGhToken runs "gh with a token in Vault".
func TestRecipeGhToken(t *testing.T) {
	requireBwrap(t)
	standin.Need(t, "gh", standin.GitHubHint)
	token := randomToken(t)
	gh := standin.GitHubEnterprise(t, token, "ghe.test")
	vault := vaulttest.Start(t)
	root := vault.Client(t, vault.RootToken)
	runVaultSetup(t, root, recipeBlock(t, "gh setup"), map[string]string{"GITHUB_TOKEN": token}, nil)
	tokenFile := recipeToken(t, root, "coily-gh", recipeBlock(t, "gh policy"))
	rule := recipeRule(t, "gh rule")
	pattern := "ghe.test:" + gh.Port + "/alice/*"
	patchRule(t, rule, examplePatch{host: "ghe.test", port: gh.Port, caFile: gh.CAFile, flags: map[string]string{"--repo": pattern, "-R": pattern}})
	renameCredential(t, rule, "GH_TOKEN", "GH_ENTERPRISE_TOKEN")
	dir := shortDir(t)
	p := startRecipeServe(t, dir, writeRecipePolicy(t, dir, nil, rule), vault, tokenFile)

	rc := newRecipeCanary(t)
	rc.AddString("the GitHub token", token)
	repo := "ghe.test:" + gh.Port + "/alice/repo"
	r := rc.run(t, p, "exec", "--env", "GH_PROMPT_DISABLED=1", "--env", "NO_COLOR=1", "--", "/usr/bin/gh", "issue", "create", "-R", repo,
		"--title", "from the recipe", "--body", "a token from Vault")
	if r.code != 0 {
		t.Fatalf("gh issue create: %+v\nrequests %q\n%s", r, gh.Requests(), p.log)
	}
	if is := gh.Issues(); len(is) != 1 || is[0].Repo != "alice/repo" || is[0].Title != "from the recipe" {
		t.Fatalf("issues %+v", is)
	}
	// The patterns hold: another owner is refused before any token is
	// fetched.
	if r := rc.run(t, p, "exec", "--", "/usr/bin/gh", "issue", "create", "-R", "ghe.test:"+gh.Port+"/mallory/repo", "--title", "x", "--body", "y"); r.code != 125 || !strings.Contains(r.stderr, "policy-deny") {
		t.Fatalf("another owner: %+v", r)
	}
	recs := egressRecords(t, dir)
	if len(recs) != 1 || !slices.Equal(recs[0].Lists["credentials"], []string{"GH_ENTERPRISE_TOKEN=vault:secret/coily/github#token"}) {
		t.Fatalf("records %+v", recs)
	}
	rc.finish(t, p, []string{"issue\x00create\x00-R\x00" + repo})
}

// TestRecipeGitHTTPS runs "git over https": clone, commit and push with
// the token from Vault through coily's credential helper.
func TestRecipeGitHTTPS(t *testing.T) {
	requireBwrap(t)
	token := randomToken(t)
	g := standin.GitHTTP(t, standin.GitOptions{Token: token, Repos: []string{"alice/repo"}, Hosts: []string{"git.test"}})
	vault := vaulttest.Start(t)
	root := vault.Client(t, vault.RootToken)
	runVaultSetup(t, root, recipeBlock(t, "git-https setup"), map[string]string{"GIT_TOKEN": token}, nil)
	tokenFile := recipeToken(t, root, "coily-git", recipeBlock(t, "git-https policy"))
	rule := recipeRule(t, "git-https rule")
	patchRule(t, rule, examplePatch{host: "git.test", port: g.Port, caFile: g.CAFile, gitCred: true})
	dir := shortDir(t)
	ws := filepath.Join(shortDir(t), "project") // not in the state directory, private to the server
	if err := os.Mkdir(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	testserver.SandboxWorkspace(t, ws) // a root server's sandbox user writes it
	p := startRecipeServe(t, dir, writeRecipePolicy(t, dir, map[string]any{"project": ws}, rule), vault, tokenFile)

	rc := newRecipeCanary(t)
	rc.AddString("the git token", token)
	identity := []string{"--env=GIT_AUTHOR_NAME=a", "--env=GIT_AUTHOR_EMAIL=a@example.com", "--env=GIT_COMMITTER_NAME=a", "--env=GIT_COMMITTER_EMAIL=a@example.com", "--env=GIT_TERMINAL_PROMPT=0"} // one --env per variable
	git := func(args ...string) {
		t.Helper()
		r := rc.run(t, p, slices.Concat([]string{"exec"}, identity, []string{"--cwd", "repo", "--", "/usr/bin/git"}, args)...)
		if r.code != 0 {
			t.Fatalf("git %s: %+v\nrequests %q", strings.Join(args, " "), r, g.Requests())
		}
	}
	if r := rc.run(t, p, "exec", "--", "/usr/bin/git", "clone", "-q", "https://git.test:"+g.Port+"/alice/repo.git", "repo"); r.code != 0 {
		t.Fatalf("clone: %+v\n%s", r, p.log)
	}
	if err := os.WriteFile(filepath.Join(ws, "repo", "notes.txt"), []byte("from the recipe\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	git("add", "notes.txt")
	git("commit", "-qm", "from the recipe")
	git("push", "-q", "origin", "HEAD:refs/heads/main")
	head := strings.TrimSpace(gitOut(t, "-c", "safe.directory=*", "-C", filepath.Join(ws, "repo"), "rev-parse", "HEAD"))
	if got := g.Ref(t, "alice/repo", "refs/heads/main"); got != head {
		t.Fatalf("the push did not land: main is %q, want %q", got, head)
	}
	for _, rec := range egressRecords(t, dir) {
		if want := "git.test:" + g.Port + "=vault:secret/coily/git#token"; !slices.Equal(rec.Lists["git_credentials"], []string{want}) {
			t.Errorf("record of %q: git_credentials %q, want %q", rec.Argv, rec.Lists["git_credentials"], want)
		}
	}
	rc.finish(t, p, []string{"\x00push\x00-q\x00origin"}, ws)
}

// TestRecipeGitHubApp runs "GitHub App tokens per exec" with the real gh:
// each exec gets its own token for the repository -R names, with the
// rule's permissions only, revoked after; a repository the App is not
// installed on is refused by the stand-in, coily having asked for that one
// repository alone; a token for one repository is refused by the API on
// another.
func TestRecipeGitHubApp(t *testing.T) {
	requireBwrap(t)
	standin.Need(t, "gh", standin.GitHubHint)
	gh := standin.GitHubEnterprise(t, randomToken(t), "ghe.test")
	rule := recipeRule(t, "github-app rule")
	cfg := rule["github_app"].(map[string]any)
	// The App as the page sets it up: installed on alice's repo and other,
	// allowed more than the rule asks (contents: write).
	app := gh.InstallApp(t, standin.AppOptions{ID: int64(cfg["app_id"].(int)), Installation: int64(cfg["installation_id"].(int)),
		Owner: "alice", Repos: []string{"repo", "other"}, Permissions: map[string]string{"issues": "write", "contents": "write"}})
	vault := vaulttest.Start(t)
	root := vault.Client(t, vault.RootToken)
	runVaultSetup(t, root, recipeBlock(t, "github-app setup"), map[string]string{"@coily-app.private-key.pem": string(app.PEM)}, nil)
	tokenFile := recipeToken(t, root, "coily-ghapp", recipeBlock(t, "github-app policy"))

	// Pointed at the stand-in, an Enterprise host ghe.test:PORT pinned to
	// loopback: the API, the variable gh reads for it, the host in the
	// patterns and the allowlist, the pin, the CA.
	host := "ghe.test:" + gh.Port
	pointAtStandin := func(rule map[string]any) {
		cfg := rule["github_app"].(map[string]any)
		cfg["api_url"], cfg["env"] = "https://"+host+"/api/v3", "GH_ENTERPRISE_TOKEN"
		patchRule(t, rule, examplePatch{host: "ghe.test", port: gh.Port, caFile: gh.CAFile,
			flags: map[string]string{"--repo": host + "/alice/*", "-R": host + "/alice/*"}})
	}
	pointAtStandin(rule)
	// Not from the page: the same rule with one fixed repository, reached
	// with --label, to show a token of alice/repo used on alice/other.
	fixed := recipeRule(t, "github-app rule")
	pointAtStandin(fixed)
	fixed["name"] = "gh-issue-create-fixed"
	fixed["flags"].(map[string]any)["--label"] = "*"
	fcfg := fixed["github_app"].(map[string]any)
	delete(fcfg, "repository_from")
	fcfg["repository"] = "alice/repo"
	dir := shortDir(t)
	p := startRecipeServe(t, dir, writeRecipePolicy(t, dir, nil, rule, fixed), vault, tokenFile)

	rc := newRecipeCanary(t)
	rc.AddString("the App's private key", string(app.PEM))
	rc.AddString("the stand-in's user token", gh.Token)
	ghExec := func(repo string, extra ...string) cliRun {
		t.Helper()
		args := append([]string{"exec", "--env", "GH_PROMPT_DISABLED=1", "--env", "NO_COLOR=1", "--", "/usr/bin/gh", "issue", "create",
			"-R", host + "/alice/" + repo, "--title", "by the App", "--body", "b"}, extra...)
		return rc.run(t, p, args...)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("requests %q\ntoken requests %+v\n%s", gh.Requests(), gh.TokenRequests(), p.log)
		}
	})

	// 1. The issue is created with a token of alice/repo, revoked after.
	if r := ghExec("repo"); r.code != 0 || !strings.Contains(r.stdout, "/alice/repo/issues/1") {
		t.Fatalf("gh issue create: %+v", r)
	}
	asked := gh.TokenRequests()
	if len(asked) != 1 || asked[0].Status != 201 {
		t.Fatalf("token requests %+v", asked)
	}
	if tok, _ := gh.InstallationToken(asked[0].Token); !tok.Revoked || tok.Repo != "alice/repo" {
		t.Fatalf("the exec's token after it: repository %s, revoked %v", tok.Repo, tok.Revoked)
	}

	// 2. A repository the App is not installed on: the stand-in refuses,
	// gh never runs.
	requestsBefore := len(gh.Requests())
	r := ghExec("secret")
	if r.code != 125 || !strings.Contains(r.stderr, "credential-unavailable") ||
		!strings.Contains(r.stderr, "not accessible to the parent installation") {
		t.Fatalf("a repository the App is not installed on: %+v", r)
	}
	if after := gh.Requests()[requestsBefore:]; len(after) != 1 || !strings.HasPrefix(after[0], "422 POST /api/v3/app/installations/") {
		t.Fatalf("requests after the refused token: %q (gh must not have run)", after)
	}

	// 3. A token of alice/repo used on alice/other: the API refuses.
	r = ghExec("other", "--label", "x")
	if r.code == 0 || !strings.Contains(r.stderr, "Could not resolve to a Repository with the name 'alice/other'") {
		t.Fatalf("a token of alice/repo on alice/other: %+v", r)
	}
	if is := gh.Issues(); len(is) != 1 || is[0].Repo != "alice/repo" {
		t.Fatalf("issues %+v", is)
	}

	// coily never asked for more: one repository and issues: write, each
	// time; every token minted is revoked.
	asked = gh.TokenRequests()
	wantRepos := [][]string{{"repo"}, {"secret"}, {"repo"}}
	if len(asked) != len(wantRepos) {
		t.Fatalf("%d token requests", len(asked))
	}
	for i, a := range asked {
		if !slices.Equal(a.Repositories, wantRepos[i]) || len(a.Permissions) != 1 || a.Permissions["issues"] != "write" || a.Issuer != "123456" {
			t.Errorf("request %d asked for %q with %v (iss %s)", i, a.Repositories, a.Permissions, a.Issuer)
		}
		if a.Token != "" {
			rc.AddString("an installation token", a.Token)
			if tok, _ := gh.InstallationToken(a.Token); !tok.Revoked {
				t.Errorf("token %d is alive", i)
			}
		}
	}
	recs := egressRecords(t, dir)
	if len(recs) != 2 {
		t.Fatalf("%d exec.result records", len(recs))
	}
	for _, rec := range recs {
		d := rec.Details
		if d["github_app_repository"] != "alice/repo" || d["github_app_revoked"] != "true" || d["github_app_token_permissions"] != "issues:write,metadata:read" ||
			d["github_app_token_expires"] == "" || !strings.HasPrefix(d["github_app"], "app 123456 installation 7890123 key vault:secret/coily/ghapp#private_key") {
			t.Errorf("record of %s: %v", rec.Rule, d)
		}
	}
	rc.finish(t, p, []string{"issue\x00create\x00-R\x00" + host + "/alice/repo"})
}
