package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"coily.dev/coily/internal/canary"
	"coily.dev/coily/internal/standin"
)

// TestGitProxyLocalSocket: `coily git setup --global` for the upstream's
// host, then plain git through git-remote-coily on git.sock: a clone, a
// new branch, a fast-forward, a force refused by the policy, a force
// approved in the web console and one approved with `coily approvals`, a
// delete refused, a repository outside the policy refused; each push and
// fetch audited; the token nowhere the agent or another process could
// read it.
func TestGitProxyLocalSocket(t *testing.T) {
	e := startGitProxy(t, "")
	c := canary.New(t)
	c.AddString("upstream token", e.token)
	argv := c.WatchArgv()
	work := t.TempDir()

	if r := runCoilyGit(t, work, e.agentEnv(), "git", "setup", "--global", "--host", e.host); r.code != 0 {
		t.Fatalf("git setup: %+v", r)
	}
	if got := e.agent(true, work, "git", "config", "--global", "--get-regexp", `^url\.`); !strings.Contains(got, "url.coily::/git/"+e.host+"/.insteadof https://"+e.host+"/") {
		t.Fatalf("git setup wrote %q", got)
	}
	app := filepath.Join(work, "app")
	e.agent(true, work, "git", "clone", "--quiet", e.url("owner/app"), app)
	if fetches := e.gitRecords("git.fetch"); len(fetches) == 0 || fetches[len(fetches)-1].Details["bytes"] == "" ||
		fetches[len(fetches)-1].Principal != "local:"+gitTestUser(t) || fetches[len(fetches)-1].Details["remote"] != "app" {
		t.Fatalf("the clone's fetch is not audited with its bytes: %+v", fetches)
	}

	// A new branch, then a fast-forward: both land upstream.
	e.agent(true, app, "git", "checkout", "--quiet", "-b", "agent/x")
	e.agent(true, app, "git", "commit", "--quiet", "--allow-empty", "-m", "one")
	e.agent(true, app, "git", "push", "--quiet", "origin", "agent/x")
	e.agent(true, app, "git", "commit", "--quiet", "--allow-empty", "-m", "two")
	e.agent(true, app, "git", "push", "--quiet", "origin", "agent/x")
	head := strings.TrimSpace(e.agent(true, app, "git", "rev-parse", "HEAD"))
	if got := e.up.Ref(t, "owner/app", "refs/heads/agent/x"); got != head {
		t.Fatalf("agent/x upstream is %q, want %q", got, head)
	}

	// A force push to app is denied; a delete too; nothing moves.
	e.agent(true, app, "git", "commit", "--quiet", "--amend", "--allow-empty", "-m", "two, amended")
	out := e.agent(false, app, "git", "push", "--force", "origin", "agent/x")
	if !strings.Contains(out, `does not allow a force`) || !strings.Contains(out, "[remote rejected] agent/x") {
		t.Fatalf("the force push's refusal: %s", out)
	}
	out = e.agent(false, app, "git", "push", "origin", ":agent/x")
	if !strings.Contains(out, "does not allow a delete of refs/heads/agent/x") {
		t.Fatalf("the delete's refusal: %s", out)
	}
	if got := e.up.Ref(t, "owner/app", "refs/heads/agent/x"); got != head {
		t.Fatalf("a refused push moved agent/x to %q", got)
	}

	// A repository the policy does not name.
	out = e.agent(false, work, "git", "ls-remote", e.url("owner/secret"))
	if !strings.Contains(out, "policy-deny: no git remote of the policy serves") {
		t.Fatalf("the unnamed repository's refusal: %s", out)
	}

	// review asks for an approval of a force push: once from the web
	// console (the owner's node), once with `coily approvals` (a tailnet
	// user's CLI).
	review := filepath.Join(work, "review")
	e.agent(true, work, "git", "clone", "--quiet", e.url("owner/review"), review)
	e.agent(true, review, "git", "checkout", "--quiet", "-b", "agent/y")
	e.agent(true, review, "git", "commit", "--quiet", "--allow-empty", "-m", "one")
	e.agent(true, review, "git", "push", "--quiet", "origin", "agent/y")
	owner := e.join("phone", "tag:owner")
	for i, approve := range []func(id string){
		func(id string) { e.consoleApprove(owner, id) },
		func(id string) { e.cliApprove(id) },
	} {
		// The subject is the agent's: a terminal escape in it is shown, not sent.
		e.agent(true, review, "git", "commit", "--quiet", "--amend", "--allow-empty", "-m", fmt.Sprintf("forced %d \x1b]0;pwned\x07\x1b[2J", i))
		want := strings.TrimSpace(e.agent(true, review, "git", "rev-parse", "HEAD"))
		done, _, out := e.backgroundOutput(review, "git", "push", "--force", "origin", "agent/y")
		id, list := e.pendingApproval()
		e.waitSaid(out, "remote: coily: waiting for approval "+id+" (up to 2m0s): the console's Approvals, or coily approvals approve "+id)
		for _, s := range []string{`wants rule "git:review"`, "refs/heads/agent/y", " force +1 -1 confirm", fmt.Sprintf("Agent: forced %d ", i)} {
			if !strings.Contains(list, s) {
				t.Fatalf("coily approvals list does not show %q:\n%s", s, list)
			}
		}
		if strings.ContainsAny(list, "\x1b\x07") {
			t.Fatalf("coily approvals list passes the subject's control characters: %q", list)
		}
		approve(id)
		if err := waitGitAgent(t, done); err != nil {
			t.Fatalf("the approved force push: %v\nserver:\n%s", err, e.log)
		}
		if got := e.up.Ref(t, "owner/review", "refs/heads/agent/y"); got != want {
			t.Fatalf("approved force push %d: agent/y is %q, want %q", i, got, want)
		}
		push := e.gitRecords("git.push")
		last := push[len(push)-1]
		if last.Details["approval"] != id || last.Decision != "allow" || !strings.HasPrefix(last.Details["upstream"], "upstream accepted") ||
			len(last.Lists["updates"]) != 1 || !strings.Contains(last.Lists["updates"][0], "refs/heads/agent/y") ||
			!strings.Contains(last.Lists["updates"][0], " force ") {
			t.Fatalf("the approved push's record: %+v", last)
		}
	}

	// Every push is one record: its updates, kinds and decisions.
	var kinds []string
	for _, r := range e.gitRecords("git.push") {
		for _, u := range r.Lists["updates"] {
			kinds = append(kinds, r.Decision+" "+strings.Fields(u)[2])
		}
	}
	if want := "allow create,allow fast_forward,refuse force,refuse delete,allow create,allow force,allow force"; strings.Join(kinds, ",") != want {
		t.Fatalf("the pushes' records: %q, want %q", kinds, want)
	}

	argv.Stop("git-remote-coily")
	c.CheckText("the agent's outputs", e.outputs...)
	c.CheckText("the server's log", e.log.String())
	c.CheckFiles(work, e.home, filepath.Join(e.dir, "git"), filepath.Join(e.dir, "audit"))
}

// TestGitProxyTailnet: an agent on another node of the tailnet reaches
// the proxy's port 7444 (its plain git through a loopback gitForwarder that
// dials through the node, so the server sees the node's identity): clone
// and push as tag:agent; a node whose principal the remote does not list
// is refused. A lockout refuses git on both transports and rejects a
// push that waits for an approval.
func TestGitProxyTailnet(t *testing.T) {
	e := startGitProxy(t, "")
	agentURL := gitForwarder(t, e.join("agent", "tag:agent"), "coily:7444")
	strangerURL := gitForwarder(t, e.join("guest", "tag:stranger"), "coily:7444")
	work := t.TempDir()

	if r := runCoilyGit(t, work, e.agentEnv(), "git", "setup", "--global", "--proxy-url", agentURL, "--host", e.host); r.code != 0 {
		t.Fatalf("git setup: %+v", r)
	}
	app := filepath.Join(work, "app")
	e.agent(true, work, "git", "clone", "--quiet", e.url("owner/app"), app)
	e.agent(true, app, "git", "checkout", "--quiet", "-b", "agent/t")
	e.agent(true, app, "git", "commit", "--quiet", "--allow-empty", "-m", "from another machine")
	e.agent(true, app, "git", "push", "--quiet", "origin", "agent/t")
	head := strings.TrimSpace(e.agent(true, app, "git", "rev-parse", "HEAD"))
	if got := e.up.Ref(t, "owner/app", "refs/heads/agent/t"); got != head {
		t.Fatalf("agent/t upstream is %q, want %q", got, head)
	}
	push := e.gitRecords("git.push")
	if len(push) != 1 || push[0].Principal != "tag:agent" || push[0].Transport != "tailnet" || push[0].Decision != "allow" {
		t.Fatalf("the tailnet push's record: %+v", push)
	}
	// review does not list tag:agent; a stranger may use neither.
	out := e.agent(false, work, "git", "ls-remote", e.url("owner/review"))
	if !strings.Contains(out, "403") {
		t.Fatalf("tag:agent on review: %s", out)
	}
	out = e.agent(false, work, "git", "ls-remote", strangerURL+"/git/"+e.host+"/owner/app.git")
	if !strings.Contains(out, "403") {
		t.Fatalf("tag:stranger on app: %s", out)
	}
	refused := 0
	for _, r := range e.gitRecords("call") {
		if r.Decision == "refuse" && r.Code == "permission-denied" && (r.Principal == "tag:stranger" || r.Principal == "tag:agent") {
			refused++
		}
	}
	if refused != 2 {
		t.Fatalf("the two refusals are not audited: %d", refused)
	}

	// A push waiting for an approval (the local operator's, on review
	// through git.sock) is rejected by a lockout; while it lasts git is
	// refused on both transports.
	review := filepath.Join(work, "review")
	local := "coily::/git/" + e.host + "/owner/review.git"
	e.agent(true, work, "git", "clone", "--quiet", local, review)
	e.agent(true, review, "git", "checkout", "--quiet", "-b", "agent/l")
	e.agent(true, review, "git", "commit", "--quiet", "--allow-empty", "-m", "one")
	e.agent(true, review, "git", "push", "--quiet", "origin", "agent/l")
	before := e.up.Ref(t, "owner/review", "refs/heads/agent/l")
	e.agent(true, review, "git", "commit", "--quiet", "--amend", "--allow-empty", "-m", "forced")
	// An agent that gives up (Ctrl-C) withdraws its push: the approval
	// is cancelled, and approving it now pushes nothing.
	done, interrupt := e.background(review, "git", "push", "--force", "origin", "agent/l")
	id, _ := e.pendingApproval()
	interrupt()
	if err := waitGitAgent(t, done); err == nil {
		t.Fatal("the interrupted push succeeded")
	}
	deadline := time.Now().Add(30 * time.Second)
	for r := e.coily("approvals", "list"); !strings.Contains(r.stdout, "no pending approvals"); r = e.coily("approvals", "list") {
		if time.Now().After(deadline) {
			t.Fatalf("the interrupted push's approval is still pending: %+v\nserver:\n%s", r, e.log)
		}
		time.Sleep(100 * time.Millisecond)
	}
	e.cliApproveRefused(id)
	if got := e.up.Ref(t, "owner/review", "refs/heads/agent/l"); got != before {
		t.Fatalf("an interrupted push moved agent/l to %q", got)
	}

	done, _ = e.background(review, "git", "push", "--force", "origin", "agent/l")
	_, _ = e.pendingApproval()
	if r := e.coily("lockout", "--reason", "git e2e"); r.code != 0 {
		t.Fatalf("lockout: %+v", r)
	}
	if err := waitGitAgent(t, done); err == nil || !strings.Contains(err.Error(), "lockout") {
		t.Fatalf("the waiting push after a lockout: %v", err)
	}
	if got := e.up.Ref(t, "owner/review", "refs/heads/agent/l"); got != before {
		t.Fatalf("a push rejected by the lockout moved agent/l to %q", got)
	}
	for _, out := range []string{e.agent(false, review, "git", "fetch", "origin"), e.agent(false, app, "git", "fetch", "origin"),
		e.agent(false, app, "git", "push", "origin", "HEAD:refs/heads/agent/locked")} {
		if !strings.Contains(out, "remote: lockout-active: server is locked out") || !strings.Contains(out, "error: 409") {
			t.Fatalf("git under a lockout: %s", out)
		}
	}
	if r := e.coily("unlock"); r.code != 0 {
		t.Fatalf("unlock: %+v", r)
	}
	e.agent(true, review, "git", "fetch", "--quiet", "origin")
	e.agent(true, app, "git", "fetch", "--quiet", "origin")
}

// ghPRCommands is a gh pr create rule for the GitHub stand-in at
// ghe.test:PORT (pinned to loopback), for the repositories of alice's
// upstream and branches under agent/.
const ghPRCommands = `commands:
  - name: gh-pr-create
    binary: /usr/bin/gh
    args: [pr, create]
    flags: {--repo: "ghe.test:%[1]s/owner/*", -R: "ghe.test:%[1]s/owner/*", --head: "agent/*", --base: main, --title: "*", --body: "*"}
    env: [GH_PROMPT_DISABLED, NO_COLOR]
    credentials: {GH_ENTERPRISE_TOKEN: "file:ghtoken"}
    network: proxied
    ca_file: %[2]s
    egress: {allow: ["ghe.test:%[1]s"], allow_cidrs: [127.0.0.0/8], hosts: {ghe.test: [127.0.0.1]}}
`

// TestGitProxyGhPRCreate: the flagship flow. The agent pushes a branch
// through the git proxy, then opens a pull request for it with gh through
// coily's shims: gh runs on the trust point with the token, and the
// GitHub stand-in creates the pull request only because the branch
// exists upstream.
func TestGitProxyGhPRCreate(t *testing.T) {
	requireBwrap(t)
	standin.Need(t, "gh", standin.GitHubHint)
	ghToken := randomToken(t)
	gh := standin.GitHubEnterprise(t, ghToken, "ghe.test")
	e := startGitProxy(t, fmt.Sprintf(ghPRCommands, gh.Port, gh.CAFile), "ghtoken="+ghToken)
	gh.SetBranches(func(repo, branch string) bool { return e.up.Ref(t, repo, "refs/heads/"+branch) != "" })
	c := canary.New(t)
	c.AddString("upstream token", e.token)
	c.AddString("GitHub token", ghToken)
	work := t.TempDir()
	shims := filepath.Join(shortDir(t), "shims")
	if r := e.coily("shim", "install", "--dir", shims); r.code != 0 {
		t.Fatalf("shim install: %+v", r)
	}
	if r := runCoilyGit(t, work, e.agentEnv(), "git", "setup", "--global", "--host", e.host); r.code != 0 {
		t.Fatalf("git setup: %+v", r)
	}
	app := filepath.Join(work, "app")
	e.agent(true, work, "git", "clone", "--quiet", e.url("owner/app"), app)
	e.agent(true, app, "git", "checkout", "--quiet", "-b", "agent/pr")
	e.agent(true, app, "git", "commit", "--quiet", "--allow-empty", "-m", "the change")

	// The agent's gh is the shim (first on PATH), its git the real one.
	pr := "PATH=" + shims + ":$PATH gh pr create -R ghe.test:" + gh.Port + "/owner/app --head agent/pr --base main --title 'From the agent' --body 'Pushed through coily'"
	out := e.agent(false, app, "/bin/sh", "-c", pr)
	if !strings.Contains(out, "Head ref must be a branch") || len(gh.PullRequests()) != 0 {
		t.Fatalf("a pull request for a branch not yet pushed: %s", out)
	}
	e.agent(true, app, "git", "push", "--quiet", "origin", "agent/pr")
	out = e.agent(true, app, "/bin/sh", "-c", pr)
	if want := gh.URL + "/owner/app/pull/1"; !strings.Contains(out, want) {
		t.Fatalf("gh pr create printed %q, want %s; requests %q", out, want, gh.Requests())
	}
	want := standin.PullRequest{Repo: "owner/app", Number: 1, Title: "From the agent", Body: "Pushed through coily", Head: "agent/pr", Base: "main"}
	if prs := gh.PullRequests(); len(prs) != 1 || prs[0] != want {
		t.Fatalf("pull requests: %+v", prs)
	}
	var ran bool
	for _, r := range e.gitRecords("exec.result") {
		ran = ran || r.Rule == "gh-pr-create" && len(r.Argv) > 0 && r.Argv[0] == "gh"
	}
	if !ran {
		t.Fatal("gh pr create is not audited as the shim's exec")
	}
	c.CheckText("the agent's outputs", e.outputs...)
	c.CheckText("the server's log", e.log.String())
	c.CheckFiles(work, e.home, filepath.Join(e.dir, "git"), filepath.Join(e.dir, "audit"))
}

// TestGitProxyOtherUIDRefused: git.sock opened to everyone, the peer
// credentials alone refuse a user who is no local operator, before any
// upstream is asked; the refusal is audited with the peer.
func TestGitProxyOtherUIDRefused(t *testing.T) {
	requireComponent(t, os.Geteuid() == 0, "root (to run git as another uid)")
	e := startGitProxy(t, "")
	sock := filepath.Join(e.dir, "git.sock")
	for _, p := range []string{e.dir, sock} {
		if err := os.Chmod(p, 0o777); err != nil {
			t.Fatal(err)
		}
	}
	home := shortDir(t) // t.TempDir's parent is root's alone
	if err := os.Chmod(home, 0o777); err != nil {
		t.Fatal(err)
	}
	before := len(e.up.Requests())
	cmd := exec.Command("git", "ls-remote", "coily::/git/"+e.host+"/owner/app.git")
	cmd.Env = append(e.agentEnv(), "HOME="+home) // the last HOME counts
	cmd.Dir = home
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "unauthenticated") {
		t.Fatalf("git as uid 65534 on git.sock: %v\n%s", err, out)
	}
	if after := e.up.Requests()[before:]; len(after) != 0 {
		t.Fatalf("upstream was asked for a refused caller: %q", after)
	}
	refused := 0
	for _, r := range e.gitRecords("call") {
		if r.Code == "unauthenticated" && strings.Contains(r.Peer, "uid=65534") {
			refused++
		}
	}
	if refused == 0 {
		t.Fatalf("the refusal of uid 65534 is not audited")
	}
}

// TestGitProxyServerCrash: a server killed while a push waits for an
// approval keeps nothing of that push once it serves again (the agent's
// unpublished objects are not left on the trust point's disk), the push
// never lands, and fetch and push work again from the kept cache. A
// pause then refuses pushes and lets fetches through.
func TestGitProxyServerCrash(t *testing.T) {
	e := startGitProxy(t, "")
	work := t.TempDir()
	if r := runCoilyGit(t, work, e.agentEnv(), "git", "setup", "--global", "--host", e.host); r.code != 0 {
		t.Fatalf("git setup: %+v", r)
	}
	review := filepath.Join(work, "review")
	e.agent(true, work, "git", "clone", "--quiet", e.url("owner/review"), review)
	e.agent(true, review, "git", "checkout", "--quiet", "-b", "agent/c")
	e.agent(true, review, "git", "commit", "--quiet", "--allow-empty", "-m", "one")
	e.agent(true, review, "git", "push", "--quiet", "origin", "agent/c")
	before := e.up.Ref(t, "owner/review", "refs/heads/agent/c")
	e.agent(true, review, "git", "commit", "--quiet", "--amend", "--allow-empty", "-m", "never published")
	done, _ := e.background(review, "git", "push", "--force", "origin", "agent/c")
	_, _ = e.pendingApproval()
	pushes := filepath.Join(e.dir, "git", "push")
	if left, _ := os.ReadDir(pushes); len(left) != 1 {
		t.Fatalf("the waiting push's directory: %v", left)
	}
	e.kill()
	if err := waitGitAgent(t, done); err == nil {
		t.Fatal("a push whose server crashed succeeded")
	}
	e.serve()
	if left, err := os.ReadDir(pushes); err != nil || len(left) != 0 {
		t.Fatalf("a crashed push's directory survived the restart: %v %v", left, err)
	}
	if got := e.up.Ref(t, "owner/review", "refs/heads/agent/c"); got != before {
		t.Fatalf("the crashed push moved agent/c to %q", got)
	}
	e.agent(true, review, "git", "fetch", "--quiet", "origin")
	e.agent(true, review, "git", "push", "--quiet", "origin", "HEAD:refs/heads/agent/after")

	if r := e.coily("pause", "--reason", "git e2e"); r.code != 0 {
		t.Fatalf("pause: %+v", r)
	}
	if out := e.agent(false, review, "git", "push", "origin", "HEAD:refs/heads/agent/paused"); !strings.Contains(out, "pause-active") {
		t.Fatalf("a push while paused: %s", out)
	}
	e.agent(true, review, "git", "fetch", "--quiet", "origin")
	if r := e.coily("resume"); r.code != 0 {
		t.Fatalf("resume: %+v", r)
	}
	e.agent(true, review, "git", "push", "--quiet", "origin", "HEAD:refs/heads/agent/paused")
}
