package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"coily.dev/coily/internal/standin"
	"coily.dev/coily/internal/testserver"
)

// examplePatch points one rule of examples/egress.yaml at a stand-in: it
// may add the stand-in's host to the allowlist, pin its name to loopback,
// trust its CA and name a workspace. It must not widen what the rule
// lets a caller do otherwise.
type examplePatch struct {
	host, port string            // the stand-in's name and port
	caFile     string            // its CA ("" for plain HTTP)
	workspace  string            // a named workspace ("" keeps temp)
	flags      map[string]string // flag patterns naming the stand-in instead of github.com
	addFlags   map[string]string // flags the rule lacks, allowed only with a value naming the stand-in (aws --endpoint-url)
	gitCred    bool              // git_credentials for the stand-in instead of github.com
}

// patchExamples writes examples/egress.yaml with the patches applied.
func patchExamples(t *testing.T, dir string, patches map[string]examplePatch) string {
	t.Helper()
	data, err := os.ReadFile("../../examples/egress.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := yaml.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	workspaces := map[string]any{}
	for _, c := range doc["commands"].([]any) {
		rule := c.(map[string]any)
		p, ok := patches[rule["name"].(string)]
		if !ok {
			continue
		}
		patchRule(t, rule, p)
		if p.workspace != "" {
			name := rule["name"].(string)
			workspaces[name] = p.workspace
			rule["workspace"] = name
		}
	}
	doc["workspaces"] = workspaces
	out, err := yaml.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return writePolicy(t, dir, string(out))
}

// patchRule points rule (a command rule as YAML decodes it) at a
// stand-in as p says, all but the workspace.
func patchRule(t *testing.T, rule map[string]any, p examplePatch) {
	t.Helper()
	eg := rule["egress"].(map[string]any)
	eg["allow"] = append(asList(eg["allow"]), p.host+":"+p.port)
	eg["allow_cidrs"] = []any{"127.0.0.0/8"}
	eg["hosts"] = map[string]any{p.host: []any{"127.0.0.1"}}
	if p.caFile != "" {
		rule["ca_file"] = p.caFile
	}
	if p.flags != nil {
		flags := rule["flags"].(map[string]any)
		for k, v := range p.flags {
			if _, ok := flags[k]; !ok {
				t.Fatalf("rule %s has no flag %s to point at the stand-in", rule["name"], k)
			}
			flags[k] = v
		}
	}
	for k, v := range p.addFlags {
		flags := rule["flags"].(map[string]any)
		if _, ok := flags[k]; ok {
			t.Fatalf("rule %s already has flag %s", rule["name"], k)
		}
		flags[k] = v
	}
	if p.gitCred {
		cred := asList(rule["git_credentials"])[0].(map[string]any)
		cred["host"] = p.host + ":" + p.port
	}
}

func asList(v any) []any {
	l, _ := v.([]any)
	return l
}

// The rules of examples/egress.yaml work with the real clients: gh
// creates and views an issue, git clones and pushes over https with
// coily's credential helper, npm and pip install, each through its own
// egress proxy against a local stand-in, each leaving its rows.
func TestExampleEgressRules(t *testing.T) {
	requireBwrap(t)
	token := randomToken(t)
	gh := standin.GitHubEnterprise(t, token, "ghe.test")
	git := standin.GitHTTP(t, standin.GitOptions{Token: token, Repos: []string{"alice/repo"}, Hosts: []string{"git.test"}})
	npm := standin.NpmRegistry(t, standin.DefaultNpmPackage)
	_, npmPort, _ := strings.Cut(npm.Host, ":")
	pip := standin.PipIndex(t, standin.PipOptions{Hosts: []string{"pypi.test"}})
	py := standin.Python(t)
	dir := shortDir(t)
	wsDir := shortDir(t) // not the state directory, private to the server
	wsFor := func(name string) string {
		ws := filepath.Join(wsDir, name)
		if err := os.Mkdir(ws, 0o755); err != nil {
			t.Fatal(err)
		}
		testserver.SandboxWorkspace(t, ws)
		return ws
	}
	gitWS, npmWS, pipWS := wsFor("git"), wsFor("npm"), wsFor("pip")
	ghRepo := "ghe.test:" + gh.Port + "/alice/*"
	pol := patchExamples(t, dir, map[string]examplePatch{
		"gh-issue-create": {host: "ghe.test", port: gh.Port, caFile: gh.CAFile, flags: map[string]string{"--repo": ghRepo, "-R": ghRepo}},
		"gh-issue-view":   {host: "ghe.test", port: gh.Port, caFile: gh.CAFile, flags: map[string]string{"--repo": ghRepo, "-R": ghRepo}},
		"git":             {host: "git.test", port: git.Port, caFile: git.CAFile, workspace: gitWS, gitCred: true},
		"npm-install":     {host: "npm.test", port: npmPort, workspace: npmWS},
		"pip-install":     {host: "pypi.test", port: pip.Port, caFile: pip.CAFile, workspace: pipWS},
	})
	creds := filepath.Join(dir, "credentials")
	if err := os.WriteFile(creds, []byte("github="+token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startServe(t, dir, pol, "--credentials-file", creds)
	run := func(args ...string) cliRun {
		t.Helper()
		r := p.run(t, append([]string{"exec"}, args...)...)
		if strings.Contains(r.stdout+r.stderr, token) {
			t.Fatalf("the token reached the caller: %v", args)
		}
		return r
	}
	ok := func(r cliRun, what string) {
		t.Helper()
		if r.code != 0 {
			t.Fatalf("%s: %+v\n%s", what, r, p.log)
		}
	}

	// gh issue create and view (only the variables the rule lets callers set).
	repo := "ghe.test:" + gh.Port + "/alice/repo"
	r := p.run(t, "exec", "--env", "GH_PROMPT_DISABLED=1", "--env", "NO_COLOR=1", "--", "/usr/bin/gh", "issue", "create", "-R", repo, "--title", "from coily", "--body", "through the proxy")
	ok(r, "gh issue create")
	if is := gh.Issues(); len(is) != 1 || is[0].Title != "from coily" || is[0].Repo != "alice/repo" {
		t.Fatalf("issues on the stand-in: %+v", is)
	}
	r = p.run(t, "exec", "--env", "GH_PROMPT_DISABLED=1", "--env", "NO_COLOR=1", "--", "/usr/bin/gh", "issue", "view", "1", "-R", repo)
	ok(r, "gh issue view")
	if !strings.Contains(r.stdout, "from coily") {
		t.Fatalf("gh issue view printed %q", r.stdout)
	}
	// The rule's flag pattern holds: another owner is refused.
	if r := p.run(t, "exec", "--", "/usr/bin/gh", "issue", "create", "-R", "ghe.test:"+gh.Port+"/mallory/repo", "--title", "x", "--body", "y"); r.code != 125 || !strings.Contains(r.stderr, "policy-deny") {
		t.Fatalf("another owner: %+v", r)
	}

	// git over https: clone, commit, push with the token from coily.
	gitEnv := []string{"--env=GIT_AUTHOR_NAME=a", "--env=GIT_AUTHOR_EMAIL=a@example.com", "--env=GIT_COMMITTER_NAME=a", "--env=GIT_COMMITTER_EMAIL=a@example.com", "--env=GIT_TERMINAL_PROMPT=0"} // one --env per variable
	ok(run(append(slices.Clone(gitEnv), "--", "/usr/bin/git", "clone", "-q", "https://git.test:"+git.Port+"/alice/repo.git", "repo")...), "git clone")
	if err := os.WriteFile(filepath.Join(gitWS, "repo", "x.txt"), []byte("x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ok(run(append(slices.Clone(gitEnv), "--cwd", "repo", "--", "/usr/bin/git", "add", "x.txt")...), "git add")
	ok(run(append(slices.Clone(gitEnv), "--cwd", "repo", "--", "/usr/bin/git", "commit", "-qm", "from the example rule")...), "git commit")
	ok(run(append(slices.Clone(gitEnv), "--cwd", "repo", "--", "/usr/bin/git", "push", "-q", "origin", "HEAD:refs/heads/main")...), "git push")
	if git.Ref(t, "alice/repo", "refs/heads/main") == "" {
		t.Fatal("the push did not land")
	}

	// npm and pip install from their registries.
	ok(run("--", "/usr/bin/npm", "install", "--registry", "http://npm.test:"+npmPort+"/", "--no-package-lock",
		"--no-audit", "--no-fund", "--no-update-notifier", "standin-pkg"), "npm install")
	if _, err := os.Stat(filepath.Join(npmWS, "node_modules", "standin-pkg")); err != nil {
		t.Fatalf("npm install left no package: %v", err)
	}
	ok(run("--", py, "-m", "pip", "install", "--isolated", "--index-url", "https://pypi.test:"+pip.Port+"/simple/",
		"--only-binary=:all:", "--no-cache-dir", "--disable-pip-version-check", "--retries", "0", "--timeout", "10",
		"--target", filepath.Join(pipWS, "site"), "standin-pkg"), "pip install")
	if _, err := os.Stat(filepath.Join(pipWS, "site", "standin_pkg")); err != nil {
		t.Fatalf("pip install left no package: %v", err)
	}

	// Every exec's record has an allow row for its stand-in and nothing
	// else allowed.
	want := map[string]string{"gh-issue-create": "ghe.test", "gh-issue-view": "ghe.test", "npm-install": "npm.test", "pip-install": "pypi.test"}
	for _, rec := range egressRecords(t, dir) {
		host, ok := want[rec.Rule]
		if rec.Rule == "git" {
			host = "git.test"
			if len(rec.Egress) == 0 { // add and commit need no network
				continue
			}
		} else if !ok {
			t.Errorf("record of rule %q", rec.Rule)
			continue
		}
		for _, row := range rec.Egress {
			if row.Decision != "allow" || row.Host != host {
				t.Errorf("rule %s: row %+v", rec.Rule, row)
			}
		}
		if len(rec.Egress) == 0 {
			t.Errorf("rule %s: no egress rows", rec.Rule)
		}
	}
}
