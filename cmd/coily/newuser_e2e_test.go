//go:build coilydev

package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"go.yaml.in/yaml/v3"

	"coily.dev/coily/internal/canary"
	"coily.dev/coily/internal/standin"
	"coily.dev/coily/internal/testlog"
	"coily.dev/coily/internal/testserver"
)

// newUserExcerpts are the README's words a new user follows before
// docs/credentials.md takes over: each must be in the README verbatim.
var newUserExcerpts = []string{
	"bin/coily dev --state-dir /tmp/coily-dev",
	". /tmp/coily-dev/env",
	`echo "$COILY_DEV_CONSOLE"`,
	"coily shim install",
	`export PATH="$HOME/.local/share/coily/shims:$PATH"`,
	"(docs/credentials.md#gh-and-git-in-coily-dev-without-vault)", // where the run goes on
}

// TestNewUserRun is a new user's run of the README's quick start and
// docs/credentials.md's "gh and git in coily dev": coily dev started as
// the README says; the tokens, the workspace, the policy and the agent's
// commands taken from the page's blocks and run as written, pointed at a
// GitHub Enterprise stand-in and git http-backend instead of github.com
// (hosts, ports, their CA, the variable gh reads for an Enterprise host,
// and the page's /tmp paths); the force push approved by pressing
// Approve in the console, in headless chromium; the audit log showing
// the run. No token is in any argv,
// output, log, audit record or the workspace.
func TestNewUserRun(t *testing.T) {
	requireBwrap(t)
	standin.Need(t, "gh", standin.GitHubHint)
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range newUserExcerpts {
		if !strings.Contains(string(readme), e) {
			t.Fatalf("the README no longer says %q", e)
		}
	}
	ghToken, gitToken := randomToken(t), randomToken(t)
	gh := standin.GitHubEnterprise(t, ghToken, "ghe.test")
	g := standin.GitHTTP(t, standin.GitOptions{Token: gitToken, Repos: []string{"alice/repo"}, Hosts: []string{"git.test"}})
	dir, ws := shortDir(t), filepath.Join(shortDir(t), "project")
	paths := strings.NewReplacer("/tmp/coily-dev", dir, "/tmp/coily-project", ws)
	c := canary.New(t)
	c.AddString("the GitHub token", ghToken)
	c.AddString("the git token", gitToken)
	argv := c.WatchArgv()

	start := time.Now()
	dev := startDev(t, dir, "--state-dir", dir)
	u := &newUser{t: t, env: newUserEnv(t)}
	u.env["GITHUB_TOKEN"], u.env["GIT_TOKEN"] = ghToken, gitToken
	u.sh(paths.Replace(recipeBlock(t, "dev credentials")))
	delete(u.env, "GITHUB_TOKEN")
	delete(u.env, "GIT_TOKEN")
	u.sh(paths.Replace(recipeBlock(t, "dev workspace")))
	testserver.SandboxReachable(t, filepath.Dir(ws)) // the test's temporary directories, not /tmp
	writeNewUserPolicy(t, dev, paths.Replace(recipeBlock(t, "dev policy")), gh, g)

	// The agent's block, pointed at the stand-ins.
	ghRepo := "ghe.test:" + gh.Port + "/alice/repo"
	hosts := strings.NewReplacer("-R alice/repo", "-R "+ghRepo, "https://github.com/", "https://git.test:"+g.Port+"/")
	var pushed string
	steps := map[string]bool{}
	for _, line := range u.lines(hosts.Replace(paths.Replace(recipeBlock(t, "dev agent")))) {
		switch {
		case strings.HasPrefix(line, ". "):
			u.source(uncomment(strings.TrimPrefix(line, ". ")))
		case strings.HasPrefix(line, "export "):
			u.export(uncomment(strings.TrimPrefix(line, "export ")))
		case strings.HasPrefix(line, "cd "):
			u.env["PWD"] = uncomment(strings.TrimPrefix(line, "cd "))
		case strings.Contains(line, "# waits for the owner's approval"):
			u.approved(line, "git-push-force")
			steps["force push"] = true
		default:
			u.run(line)
		}
		switch {
		case line == "coily shim install":
			for _, name := range []string{"gh", "git"} {
				if _, err := os.Lstat(filepath.Join(u.env["HOME"], ".local/share/coily/shims", name)); err != nil {
					t.Fatalf("after %q: %v", line, err)
				}
			}
			steps["shims"] = true
		case strings.HasPrefix(line, "gh issue create"):
			if is := gh.Issues(); len(is) != 1 || is[0].Repo != "alice/repo" || is[0].Title != "Flaky test" {
				t.Fatalf("issues after %q: %+v", line, is)
			}
			steps["issue"] = true
		case strings.Contains(line, "git push -q"):
			pushed = repoHead(t, ws)
			if got := g.Ref(t, "alice/repo", "refs/heads/main"); got != pushed {
				t.Fatalf("the push did not land: main is %q, want %q", got, pushed)
			}
			steps["push"] = true
		}
	}
	if len(steps) != 4 {
		t.Fatalf("the page's agent block lacks a step of the run: has only %v", steps)
	}
	if head := repoHead(t, ws); head == pushed || g.Ref(t, "alice/repo", "refs/heads/main") != head {
		t.Fatalf("the force push did not land: main is %q, pushed %q, head %q", g.Ref(t, "alice/repo", "refs/heads/main"), pushed, head)
	}
	// git's identity came from the agent's environment, by the rule's
	// pass_env, through coily exec.
	if who := gitOut(t, "-c", "safe.directory=*", "-C", filepath.Join(ws, "repo"), "log", "-1", "--format=%an <%ae> / %cn <%ce>"); strings.TrimSpace(who) != "Agent <agent@example.com> / Agent <agent@example.com>" {
		t.Fatalf("the commit's author and committer: %q, want the agent's exported identity", who)
	}

	// The audit log shows the run, the approval and who gave it.
	tail := u.run(paths.Replace(strings.TrimSpace(recipeBlock(t, "dev audit"))))
	// The bare names, as the agent typed them through the shims.
	for _, want := range []string{"exec.result  allow  tag:agent  gh issue create -R", "exec.result  allow  tag:agent  git clone -q",
		"exec.result  allow  tag:agent  git push -q origin", "approval.request    tag:agent  git push -f -v origin",
		"approval.decide  allow  tag:owner  git push -f -v origin", "exec.result  allow  tag:agent  git push -f -v origin"} {
		if !strings.Contains(tail, want) {
			t.Errorf("audit tail does not show %q:\n%s", want, tail)
		}
	}
	// The approval id the agent was told finds the whole request.
	show := u.run("coily --state-dir " + dir + " audit show " + u.approvalID)
	if !strings.Contains(show, "rule      git-push-force") || !strings.Contains(show, "approved_by=tag:owner") || !strings.Contains(show, u.requestID) {
		t.Errorf("audit show %s:\n%s", u.approvalID, show)
	}
	t.Logf("the new user's run took %s", time.Since(start).Round(100*time.Millisecond))

	argv.Stop("issue\x00create\x00-R\x00"+ghRepo, "push\x00-f\x00-v\x00origin")
	dev.stop(t)
	c.CheckText("the agent's environment", u.environ()...)
	c.CheckText("coily's output", u.outputs...)
	c.CheckText("the audit log", readAudit(t, dir))
	c.CheckText("coily dev's log", dev.log.String())
	// Everything coily dev keeps (audit log, store, scratch directories,
	// the tailnet's state) but the credentials file the tokens were put in.
	roots := []string{ws}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() != "credentials" {
			roots = append(roots, filepath.Join(dir, e.Name()))
		}
	}
	c.CheckFiles(roots...)
}

// newUser is a new user's shell: its environment and what it printed.
type newUser struct {
	t          *testing.T
	env        map[string]string
	outputs    []string
	requestID  string // of the approved force push
	approvalID string // the id the agent was told
}

// newUserEnv is a fresh shell's environment in a checkout of coily
// (its PWD) where scripts/dev.sh built bin/coily.
func newUserEnv(t *testing.T) map[string]string {
	t.Helper()
	checkout := shortDir(t)
	if err := os.Mkdir(filepath.Join(checkout, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(coilyBin, filepath.Join(checkout, "bin", "coily")); err != nil {
		t.Fatal(err)
	}
	return map[string]string{"PATH": "/usr/bin:/bin", "HOME": shortDir(t), "TMPDIR": os.TempDir(), "PWD": checkout}
}

// source does `. FILE` for coily dev's env file: its export lines.
func (u *newUser) source(file string) {
	u.t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		u.t.Fatal(err)
	}
	for _, m := range regexp.MustCompile(`(?m)^export ([A-Z_]+)='([^']*)'$`).FindAllStringSubmatch(string(data), -1) {
		u.env[m[1]] = m[2]
	}
	if u.env["COILY_DEV"] == "" || u.env["COILY_DEV_CONSOLE"] == "" {
		u.t.Fatalf("%s: %s", file, data)
	}
}

// uncomment is line without its trailing comment.
func uncomment(line string) string {
	if i := strings.Index(line, " #"); i >= 0 {
		line = line[:i]
	}
	return strings.TrimSpace(line)
}

// lines are a block's commands: no blank lines or comment lines.
func (u *newUser) lines(block string) []string {
	var out []string
	for _, l := range strings.Split(block, "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			out = append(out, l)
		}
	}
	return out
}

// export does `export NAME=VALUE`, VALUE expanded as the shell would.
func (u *newUser) export(assigns string) {
	for _, assign := range strings.Fields(assigns) { // the page's values have no spaces
		name, value, ok := strings.Cut(assign, "=")
		if !ok {
			u.t.Fatalf("export %s", assigns)
		}
		u.env[name] = os.Expand(strings.Trim(value, `"`), func(k string) string { return u.env[k] })
	}
}

func (u *newUser) environ() []string {
	var out []string
	for k, v := range u.env {
		out = append(out, k+"="+v)
	}
	return out
}

// command is line run by /bin/sh in the user's environment, in the
// checkout (the agent's directory is not the workspace).
func (u *newUser) command(line string) *exec.Cmd {
	cmd := exec.Command("/bin/sh", "-c", line)
	cmd.Env, cmd.Dir = u.environ(), u.env["PWD"]
	return cmd
}

// run runs line, which must succeed, and returns its standard output.
func (u *newUser) run(line string) string {
	u.t.Helper()
	cmd := u.command(line)
	var out, errOut strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	u.outputs = append(u.outputs, out.String(), errOut.String())
	if err != nil {
		u.t.Fatalf("%s: %v\nstdout %s\nstderr %s", line, err, out.String(), errOut.String())
	}
	return out.String()
}

// sh runs a block as one shell script.
func (u *newUser) sh(block string) { u.t.Helper(); u.run(block) }

// approved starts line, which waits for an approval of rule, approves it
// in coily dev's console in a browser, and waits for line to succeed.
func (u *newUser) approved(line, rule string) {
	t := u.t
	t.Helper()
	cmd := u.command(line)
	out, errOut := new(testlog.Buffer), new(testlog.Buffer)
	cmd.Stdout, cmd.Stderr = out, errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var waitErr error
	done := make(chan struct{})
	go func() { waitErr = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		select {
		case <-done:
		default:
			_ = cmd.Process.Kill()
			<-done
		}
	})
	console := strings.TrimSuffix(u.env["COILY_DEV_CONSOLE"], "/")
	var list struct {
		Approvals []struct {
			ID        string `json:"id"`
			RequestID string `json:"request_id"`
			Requester string `json:"requester"`
			Rule      string `json:"rule"`
			Cwd       string `json:"cwd"`
		} `json:"approvals"`
	}
	deadline := time.Now().Add(30 * time.Second)
	for consoleGet(t, console+"/api/approvals", &list); len(list.Approvals) == 0 || !strings.Contains(errOut.String(), list.Approvals[0].ID); consoleGet(t, console+"/api/approvals", &list) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: no approval the agent was told of: %+v\nstderr %s", line, list, errOut)
		}
		time.Sleep(50 * time.Millisecond)
	}
	a := list.Approvals[0]
	// The approver sees the directory the push runs in: the clone, where
	// the agent is.
	if len(list.Approvals) != 1 || a.Requester != "tag:agent" || a.Rule != rule || a.Cwd != "repo" {
		t.Fatalf("approvals: %+v", list.Approvals)
	}
	approveInChromium(t, console+"/", a.ID)
	u.requestID, u.approvalID = a.RequestID, a.ID
	select {
	case <-done:
		u.outputs = append(u.outputs, out.String(), errOut.String())
		if waitErr != nil {
			t.Fatalf("%s, approved: %v\nstdout %s\nstderr %s", line, waitErr, out, errOut)
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("%s did not end once approved\nstderr %s", line, errOut)
	}
}

// approveInChromium opens the console at home in headless chromium, as
// the owner would in a browser, and presses Approve on approval id's card.
func approveInChromium(t *testing.T, home, id string) {
	t.Helper()
	chromium, err := exec.LookPath("chromium")
	requireComponent(t, err == nil, "chromium (scripts/test.sh installs it)")
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium), chromedp.NoSandbox, chromedp.DisableGPU, chromedp.UserDataDir(t.TempDir()),
		chromedp.Flag("disable-quic", true), chromedp.Flag("disable-component-update", true))
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	bctx, cancelBrowser := chromedp.NewContext(allocCtx)
	defer cancelBrowser()
	ctx, cancel := context.WithTimeout(bctx, 60*time.Second)
	defer cancel()
	card := `#approvals .approval[data-approval-id="` + id + `"]`
	if err := chromedp.Do(ctx, chromedp.Navigate(home)); err != nil {
		t.Fatalf("open the console: %v", err)
	}
	if _, err := chromedp.Run(ctx, chromedp.Poll[chromedp.Void](`document.querySelector('`+card+` button.approve') !== null`,
		chromedp.WithPollingTimeout(30*time.Second))); err != nil {
		t.Fatalf("no Approve button for %s on the console's page: %v", id, err)
	}
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(card+" button.approve"))); err != nil {
		t.Fatalf("press Approve: %v", err)
	}
	if _, err := chromedp.Run(ctx, chromedp.Poll[chromedp.Void](`document.querySelector('`+card+`') === null`,
		chromedp.WithPollingTimeout(30*time.Second))); err != nil {
		t.Fatalf("the approval stayed on the page once approved: %v", err)
	}
}

// consoleGet reads url of the console's API as its page does, decoding
// the answer into out.
func consoleGet(t *testing.T, url string, out any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(body, out); err != nil {
		t.Fatalf("GET %s: %d %q", url, resp.StatusCode, body)
	}
}

// writeNewUserPolicy writes the page's policy, pointed at the stand-ins,
// onto coily dev's by rename, as the page says, and waits for coily dev
// to log it in force.
func writeNewUserPolicy(t *testing.T, dev *devProc, block string, gh *standin.GitHub, g *standin.Git) {
	t.Helper()
	// As the page has it, the policy checks without a warning.
	written := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(written, []byte(block), 0o600); err != nil {
		t.Fatal(err)
	}
	if r := runCoily(t, nil, "policy", "check", written); r.code != 0 || strings.Contains(r.stdout+r.stderr, "warning") {
		t.Fatalf("policy check of the page's policy: %+v", r)
	}
	var doc map[string]any
	if err := yaml.Unmarshal([]byte(block), &doc); err != nil {
		t.Fatal(err)
	}
	for _, c := range doc["commands"].([]any) {
		rule := c.(map[string]any)
		switch rule["name"] {
		case "gh-issue-create":
			pattern := "ghe.test:" + gh.Port + "/alice/*"
			patchRule(t, rule, examplePatch{host: "ghe.test", port: gh.Port, caFile: gh.CAFile, flags: map[string]string{"--repo": pattern, "-R": pattern}})
			renameCredential(t, rule, "GH_TOKEN", "GH_ENTERPRISE_TOKEN")
		case "git", "git-push-force":
			patchRule(t, rule, examplePatch{host: "git.test", port: g.Port, caFile: g.CAFile, gitCred: true})
		default:
			t.Fatalf("the page's policy has a rule %v this test does not point at a stand-in", rule["name"])
		}
	}
	data, err := yaml.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dev.dir, "policy.yaml")
	if err := os.WriteFile(path+".new", data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".new", path); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	want := hex.EncodeToString(sum[:])
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(dev.log.String(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("coily dev did not put the policy in force (sha256 %s):\n%s", want, dev.log)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if strings.Contains(dev.log.String(), "policy reload refused") {
		t.Fatalf("coily dev refused the policy:\n%s", dev.log)
	}
}

// repoHead is HEAD of the repository the agent cloned into the
// workspace.
func repoHead(t *testing.T, ws string) string {
	t.Helper()
	return strings.TrimSpace(gitOut(t, "-c", "safe.directory=*", "-C", filepath.Join(ws, "repo"), "rev-parse", "HEAD"))
}
