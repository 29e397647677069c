package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"coily.dev/coily/audit"
	"coily.dev/coily/internal/standin"
	"coily.dev/coily/internal/testserver"
)

// gitCredPolicy writes a policy whose git rule works in workspace ws,
// reaches git.test and other.test (both pinned to the stand-in on
// loopback) through its egress proxy, trusts the stand-in's CA through
// ca_file, and has a git credential for git.test only. The repository's
// .git/config is writable, so that a command can plant helpers in it.
func gitCredPolicy(t *testing.T, dir, ws, caFile, port string) string {
	t.Helper()
	p := filepath.Join(dir, "policy.yaml")
	body := fmt.Sprintf(`version: 1
workspaces: {ws: %s}
roles:
  operator:
    permissions: [exec, lockout, unlock, pause, resume, status]
    commands: [git]
commands:
  - name: git
    binary: /usr/bin/git
    args: ["**"]
    flags: any
    workspace: ws
    writable: [.git, .git/config]
    env: [GIT_AUTHOR_NAME, GIT_AUTHOR_EMAIL, GIT_COMMITTER_NAME, GIT_COMMITTER_EMAIL, GIT_TERMINAL_PROMPT]
    network: proxied
    ca_file: %s
    egress:
      allow: ["git.test:%[3]s", "other.test:%[3]s"]
      allow_cidrs: [127.0.0.0/8]
      hosts: {git.test: [127.0.0.1], other.test: [127.0.0.1]}
    git_credentials:
      - {host: "git.test:%[3]s", password: "file:gittoken"}
`, ws, caFile, port)
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// git over https inside the sandbox gets its credential from coily's
// helper: clone, commit and push to a real git http-backend over TLS
// work; the token appears in no output, audit record or server log; the
// same server under a name the rule gives no credential for gets none,
// and the push fails.
func TestCLIExecGitCredentials(t *testing.T) {
	requireBwrap(t)
	token := randomToken(t)
	g := standin.GitHTTP(t, standin.GitOptions{Token: token, Repos: []string{"owner/repo"}, Hosts: []string{"git.test", "other.test"}})
	dir := shortDir(t)
	ws := filepath.Join(shortDir(t), "ws") // not in the state directory, private to the server
	if err := os.Mkdir(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	creds := filepath.Join(dir, "credentials")
	if err := os.WriteFile(creds, []byte("gittoken="+token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	testserver.SandboxWorkspace(t, ws)
	p := startServe(t, dir, gitCredPolicy(t, dir, ws, g.CAFile, g.Port), "--credentials-file", creds)
	identity := []string{"--env=GIT_AUTHOR_NAME=a", "--env=GIT_AUTHOR_EMAIL=a@example.com", "--env=GIT_COMMITTER_NAME=a", "--env=GIT_COMMITTER_EMAIL=a@example.com", "--env=GIT_TERMINAL_PROMPT=0"} // one --env per variable
	var outputs []string
	git := func(wantOK bool, args ...string) cliRun {
		t.Helper()
		r := p.run(t, slices.Concat([]string{"exec"}, identity, []string{"--cwd", "repo", "--", "/usr/bin/git"}, args)...)
		outputs = append(outputs, r.stdout, r.stderr)
		if (r.code == 0) != wantOK {
			t.Fatalf("git %s: exit %d\nstdout: %s\nstderr: %s\nrequests: %q", strings.Join(args, " "), r.code,
				redactToken(r.stdout, token), redactToken(r.stderr, token), g.Requests())
		}
		return r
	}

	url := "https://git.test:" + g.Port + "/owner/repo.git"
	r := p.run(t, "exec", "--", "/usr/bin/git", "clone", "--quiet", url, "repo")
	outputs = append(outputs, r.stdout, r.stderr)
	if r.code != 0 {
		t.Fatalf("clone: %+v\n%s", r, p.log)
	}
	git(true, "commit", "--quiet", "--allow-empty", "-m", "one")
	// Helpers planted in the repository's configuration never run: were
	// they asked to store, they would be given the password.
	plantHelpers(t, filepath.Join(ws, "repo", ".git", "config"), "git.test:"+g.Port)
	r = git(true, "push", "origin", "HEAD:refs/heads/main")
	if strings.Contains(r.stderr, "planted-helper-ran") {
		t.Fatalf("a helper from the repository's configuration ran: %q", r.stderr)
	}
	// push -u records the upstream in .git/config, which the rule may
	// write: written by lock and rename, and said to be so.
	r = git(true, "push", "-u", "origin", "HEAD:refs/heads/main")
	if strings.Contains(r.stderr, "busy") || strings.Contains(r.stderr, "error:") {
		t.Fatalf("push -u: %q", r.stderr)
	}
	if cfg, err := os.ReadFile(filepath.Join(ws, "repo", ".git", "config")); err != nil || !strings.Contains(string(cfg), "merge = refs/heads/main") {
		t.Fatalf("push -u did not record the upstream: %s %v", cfg, err)
	}
	head := strings.TrimSpace(git(true, "rev-parse", "HEAD").stdout)
	if got := g.Ref(t, "owner/repo", "refs/heads/main"); got == "" || got != head {
		t.Fatalf("the push did not land: main is %q, want %q; requests %q", got, head, g.Requests())
	}

	// The same server as other.test: allowed by egress, but the rule has
	// no credential for it, so git gets none and the push is refused.
	git(true, "commit", "--quiet", "--allow-empty", "-m", "two")
	r = git(false, "push", "https://other.test:"+g.Port+"/owner/repo.git", "HEAD:refs/heads/main")
	if !strings.Contains(r.stderr, "coily: git credential: ") || !strings.Contains(r.stderr, "no credential for other.test:"+g.Port) {
		t.Fatalf("the helper did not say why it gave nothing: %q", r.stderr)
	}
	if got := g.Ref(t, "owner/repo", "refs/heads/main"); got != head {
		t.Fatalf("a push to a host without a credential landed: main is %q", got)
	}
	if reqs := strings.Join(g.Requests(), "\n"); !strings.Contains(reqs, "401 POST") && !strings.Contains(reqs, "401 GET") {
		t.Fatalf("the push without a credential was not refused by the server: %s", reqs)
	}

	for _, out := range outputs {
		if strings.Contains(out, token) {
			t.Fatalf("the token reached the caller: %q", redactToken(out, token))
		}
	}
	audit := readAudit(t, dir)
	if strings.Contains(audit, token) || strings.Contains(p.log.String(), token) {
		t.Fatal("the token is in the audit log or the server's log")
	}
	if want := `"git_credentials":["git.test:` + g.Port + `=file:gittoken"]`; !strings.Contains(audit, want) {
		t.Fatalf("the audit log does not name the git credential (%s)", want)
	}
	checkGitCredentialsUsed(t, dir, g.Port)
}

// checkGitCredentialsUsed: under one rule, a run that reached the
// credential's host used it (credentials_used says so, with the
// connections the egress proxy counted); one that reached nothing
// (rev-parse) or another host (other.test) did not.
func checkGitCredentialsUsed(t *testing.T, dir, port string) {
	t.Helper()
	recs, err := audit.Tail(filepath.Join(dir, "audit"), 200)
	if err != nil {
		t.Fatal(err)
	}
	used := "git credential helper for https://git.test:" + port + " from file:gittoken (its host reached: "
	seen := map[string]bool{}
	for _, rec := range recs {
		if rec.Event != "exec.result" {
			continue
		}
		argv := strings.Join(rec.Argv, " ")
		has := slices.ContainsFunc(rec.CredentialsUsed, func(s string) bool { return strings.HasPrefix(s, used) })
		switch {
		case strings.HasSuffix(argv, "git push origin HEAD:refs/heads/main"), strings.HasSuffix(argv, "git push -u origin HEAD:refs/heads/main"):
			seen["push"] = true
			if !has {
				t.Errorf("%s: credentials_used %q, want the password used", argv, rec.CredentialsUsed)
			}
		case strings.HasSuffix(argv, "git rev-parse HEAD"), strings.Contains(argv, "other.test"):
			seen["unused"] = true
			if len(rec.CredentialsUsed) != 0 {
				t.Errorf("%s: credentials_used %q, want none", argv, rec.CredentialsUsed)
			}
		}
	}
	if !seen["push"] || !seen["unused"] {
		t.Fatalf("the runs were not all in the audit log: %v", seen)
	}
}

// plantHelpers appends credential helpers to a repository's
// configuration, for every URL and for the host's, each printing a marker
// and its input (the password, on store) to stderr.
func plantHelpers(t *testing.T, config, host string) {
	t.Helper()
	evil := quoteGit("!f() { echo planted-helper-ran >&2; cat >&2; }; f")
	f, err := os.OpenFile(config, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	_, err = fmt.Fprintf(f, "[credential]\n\thelper = %s\n\tuseHttpPath = true\n[credential \"https://%s\"]\n\thelper = %[1]s\n"+
		"[credential \"https://%[2]s/owner/repo.git\"]\n\thelper = %[1]s\n", evil, host)
	if err != nil {
		t.Fatal(err)
	}
}

func redactToken(s, token string) string { return strings.ReplaceAll(s, token, "<token>") }
