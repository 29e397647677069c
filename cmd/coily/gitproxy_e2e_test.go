package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"tailscale.com/tsnet"

	"coily.dev/coily/audit"
	"coily.dev/coily/internal/canary"
	"coily.dev/coily/internal/devnet"
	"coily.dev/coily/internal/standin"
	"coily.dev/coily/internal/testlog"
)

// gitProxyPolicy serves two remotes of one upstream: app (a force push
// refused) for local operators and tag:agent, review (a force push waits
// for an approval) for local operators only. The tailnet's owner node
// and its users approve. Local operators run the command rules that
// follow it.
const gitProxyPolicy = `version: 1
roles:
  operator: {permissions: [exec, lockout, unlock, pause, resume, status, approve], commands: ["*"]}
  owner: {permissions: [status, approve, lockout, unlock]}
  approver: {permissions: [status, approve]}
  agent: {permissions: [exec]}
  stranger: {permissions: [exec]}
grants:
  - {principals: ["tag:owner"], roles: [owner]}
  - {principals: ["tag:agent"], roles: [agent]}
  - {principals: ["tag:stranger"], roles: [stranger]}
  - {principals: ["*@fake-control.example.net"], roles: [approver]}
git:
  remotes:
    - name: app
      url: https://%[1]s/owner/app
      roles: [operator, agent]
      credential: file:gittoken
      ca_file: %[2]s
      allow_cidrs: [127.0.0.0/8, "::1/128"]
      push: {refs: ["refs/heads/agent/*"], create: allow, fast_forward: allow, force: deny, delete: deny}
    - name: review
      url: https://%[1]s/owner/review
      roles: [operator]
      credential: file:gittoken
      ca_file: %[2]s
      allow_cidrs: [127.0.0.0/8, "::1/128"]
      push: {refs: ["refs/heads/agent/*"], create: allow, fast_forward: allow, force: confirm, delete: deny, confirm_timeout: 2m}
`

// gitProxyEnv is one end-to-end run of the git proxy: a real upstream
// (git http-backend over TLS), a dev tailnet, `coily serve --tailnet
// --web` with the git proxy on git.sock and on the node's port 7444, and
// the agent's plain git with its own HOME.
type gitProxyEnv struct {
	t        *testing.T
	up       *standin.Git
	net      *devnet.Net
	dir      string // the server's state directory
	socket   string
	log      *testlog.Buffer
	srv      *exec.Cmd
	exited   chan struct{}
	home     string // the agent's HOME
	host     string // the upstream's localhost:PORT
	token    string
	console  string // the web console's tailnet URL
	helpers  string // the directory holding git-remote-coily
	outputs  []string
	outputMu sync.Mutex
}

// startGitProxy starts it all; commands (a commands: section) and
// credLines (NAME=VALUE lines of the credentials file) are added to the
// policy's and the file's.
func startGitProxy(t *testing.T, commands string, credLines ...string) *gitProxyEnv {
	t.Helper()
	standin.Need(t, "git", standin.GitHint)
	e := &gitProxyEnv{t: t, token: randomToken(t), dir: shortDir(t), home: t.TempDir(), log: new(testlog.Buffer), helpers: gitRemoteHelperDir(t)}
	e.socket = filepath.Join(e.dir, "coily.sock")
	e.up = standin.GitHTTP(t, standin.GitOptions{Token: e.token, Repos: []string{"owner/app", "owner/review", "owner/secret"}, Hosts: []string{"localhost"}})
	e.host = "localhost:" + e.up.Port
	e.seed("owner/app")
	e.seed("owner/review")
	n, err := devnet.Start(nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close)
	e.net = n
	if err := os.WriteFile(filepath.Join(e.dir, "credentials"), []byte(strings.Join(append([]string{"gittoken=" + e.token}, credLines...), "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(e.dir, "policy.yaml"), []byte(fmt.Sprintf(gitProxyPolicy, e.host, e.up.CAFile)+commands), 0o600); err != nil {
		t.Fatal(err)
	}
	e.serve()
	return e
}

// serve starts `coily serve` and waits until it serves the git proxy on
// both routes and the console; it is stopped (SIGTERM) at the test's end
// unless e.kill stopped it before.
func (e *gitProxyEnv) serve() {
	t := e.t
	t.Helper()
	e.log = new(testlog.Buffer)
	e.srv = exec.Command(coilyBin, "serve", "--tailnet", "--hostname", "coily", "--control-url", e.net.ControlURL, "--web", "--web-http",
		"--state-dir", e.dir, "--policy", filepath.Join(e.dir, "policy.yaml"), "--credentials-file", filepath.Join(e.dir, "credentials"))
	e.srv.Env, e.srv.Stdout, e.srv.Stderr = append(os.Environ(), devnet.OfflineEnv()...), e.log, e.log
	if err := e.srv.Start(); err != nil {
		t.Fatal(err)
	}
	srv, log, exited := e.srv, e.log, make(chan struct{})
	e.exited = exited
	go func() { _ = srv.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = srv.Process.Signal(syscall.SIGTERM)
		<-exited
		if strings.Contains(log.String(), e.token) {
			t.Error("the upstream token is in the server's log")
		}
	})
	consoleURL := regexp.MustCompile(`serving the web console" url=(\S+)`)
	deadline := time.Now().Add(90 * time.Second)
	for {
		s := log.String()
		if m := consoleURL.FindStringSubmatch(s); m != nil && strings.Contains(s, "tailnet=coily:7444") {
			e.console = m[1]
			return
		}
		select {
		case <-exited:
			t.Fatalf("coily serve exited:\n%s", s)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("coily serve did not serve the git proxy and the console:\n%s", s)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// kill SIGKILLs the server (a crash) and waits for it.
func (e *gitProxyEnv) kill() {
	_ = e.srv.Process.Kill()
	<-e.exited
}

// gitRemoteHelperDir builds git-remote-coily once (or copies the one
// scripts/test.sh prebuilt) into a directory every user may read.
func gitRemoteHelperDir(t *testing.T) string {
	t.Helper()
	gitHelperOnce.Do(func() {
		dir, err := os.MkdirTemp("", "coily-git-helper-")
		if err == nil {
			err = os.Chmod(dir, 0o755)
		}
		if err != nil {
			gitHelperErr = err
			return
		}
		bin := filepath.Join(dir, "git-remote-coily")
		if prebuilt := os.Getenv("COILY_TEST_GIT_REMOTE_COILY"); prebuilt != "" {
			gitHelperErr = copyExecutable(prebuilt, bin)
		} else if out, err := exec.Command("go", "build", "-o", bin, "../git-remote-coily").CombinedOutput(); err != nil {
			gitHelperErr = errors.New(string(out))
		}
		gitHelperDir = dir
	})
	if gitHelperErr != nil {
		t.Fatalf("build git-remote-coily: %v", gitHelperErr)
	}
	return gitHelperDir
}

var (
	gitHelperOnce sync.Once
	gitHelperDir  string
	gitHelperErr  error
)

// seed gives an upstream repository a first commit on main, pushed to its
// directory.
func (e *gitProxyEnv) seed(repo string) {
	work := filepath.Join(e.t.TempDir(), "seed")
	gitOut(e.t, "init", "--quiet", "--initial-branch=main", work)
	gitOut(e.t, "-C", work, "commit", "--quiet", "--allow-empty", "-m", "first")
	gitOut(e.t, "-C", work, "push", "--quiet", e.up.Dir(repo), "main")
}

// agentEnv is the agent's environment: its HOME (where coily git setup
// --global writes), git-remote-coily on PATH, the server's socket, no
// system configuration and no terminal prompt.
func (e *gitProxyEnv) agentEnv() []string {
	return []string{"PATH=" + e.helpers + ":" + os.Getenv("PATH"), "HOME=" + e.home, "COILY_SOCKET=" + e.socket,
		"GIT_CONFIG_NOSYSTEM=1", "GIT_TERMINAL_PROMPT=0", "LC_ALL=C", "TMPDIR=" + os.TempDir(),
		"GIT_AUTHOR_NAME=Agent", "GIT_AUTHOR_EMAIL=agent@example.com", "GIT_COMMITTER_NAME=Agent", "GIT_COMMITTER_EMAIL=agent@example.com"}
}

// agent runs the agent's command in dir; ok says whether it must
// succeed. Its output must not hold the token.
func (e *gitProxyEnv) agent(ok bool, dir string, argv ...string) string {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir, cmd.Env = dir, e.agentEnv()
	out, err := cmd.CombinedOutput()
	e.seen(string(out))
	if (err == nil) != ok {
		e.t.Fatalf("%s: %v (want success %v)\n%s\nserver:\n%s", strings.Join(argv, " "), err, ok, out, e.log)
	}
	return string(out)
}

func (e *gitProxyEnv) seen(out string) {
	e.outputMu.Lock()
	defer e.outputMu.Unlock()
	if strings.Contains(out, e.token) {
		e.t.Errorf("the agent saw the upstream token")
	}
	e.outputs = append(e.outputs, out)
}

// background starts the agent's command in a process group of its own
// and returns its result later, and an interrupt (a Ctrl-C: SIGINT to
// the group).
func (e *gitProxyEnv) background(dir string, argv ...string) (<-chan error, func()) {
	cmd := exec.Command(argv[0], argv[1:]...)
	var out bytes.Buffer
	cmd.Dir, cmd.Env, cmd.Stdout, cmd.Stderr = dir, e.agentEnv(), &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	done := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
	go func() {
		err := cmd.Wait()
		e.seen(out.String())
		if err != nil {
			err = fmt.Errorf("%w: %s", err, out.String())
		}
		done <- err
	}()
	return done, func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGINT) }
}

func waitErr(t *testing.T, ch <-chan error) error {
	t.Helper()
	select {
	case err := <-ch:
		return err
	case <-time.After(2 * time.Minute):
		t.Fatal("the agent's command did not finish")
		return nil
	}
}

// url is the upstream's URL of a repository, as the agent types it.
func (e *gitProxyEnv) url(repo string) string { return "https://" + e.host + "/" + repo + ".git" }

// coily runs the coily CLI on the local socket.
func (e *gitProxyEnv) coily(args ...string) cliRun {
	e.t.Helper()
	return runCoily(e.t, nil, append([]string{"--socket", e.socket}, args...)...)
}

// join starts a node on the dev tailnet with tags.
func (e *gitProxyEnv) join(name string, tags ...string) *tsnet.Server {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	node, err := devnet.Join(ctx, e.net.ControlURL, devnet.NodeOptions{Dir: e.t.TempDir(), Hostname: name, Tags: tags, Ephemeral: true})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { node.Close() })
	if err := devnet.WaitReachable(ctx, node, "coily"); err != nil {
		e.t.Fatal(err)
	}
	return node
}

// pendingApproval waits until one approval is pending and returns its id
// and `coily approvals list`.
func (e *gitProxyEnv) pendingApproval() (string, string) {
	e.t.Helper()
	re := regexp.MustCompile(`(?m)^(\S+)\s+pending\s+\S+ wants `)
	deadline := time.Now().Add(60 * time.Second)
	for {
		r := e.coily("approvals", "list")
		if m := re.FindStringSubmatch(r.stdout); r.code == 0 && m != nil {
			return m[1], r.stdout
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("no approval appeared: %+v\nserver:\n%s", r, e.log)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// consoleClient is an HTTP client whose connections go through node.
func consoleClient(node *tsnet.Server) *http.Client {
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DialContext: node.Dial}}
}

// gitRecords are the audit records of event, in order.
func (e *gitProxyEnv) gitRecords(event string) []audit.Record {
	e.t.Helper()
	recs, err := audit.Tail(filepath.Join(e.dir, "audit"), 1000)
	if err != nil {
		e.t.Fatal(err)
	}
	var out []audit.Record
	for _, r := range recs {
		if r.Event == event {
			out = append(out, r)
		}
	}
	return out
}

// forwarder listens on loopback and relays each connection to addr
// through node, so that the server sees the node's identity.
func forwarder(t *testing.T, node *tsnet.Server, addr string) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				up, err := node.Dial(context.Background(), "tcp", addr)
				if err != nil {
					return
				}
				defer up.Close()
				go func() { _, _ = io.Copy(up, c); up.Close() }()
				_, _ = io.Copy(c, up)
			}()
		}
	}()
	return "http://" + l.Addr().String()
}

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

	if r := runCoilyIn(t, work, e.agentEnv(), "git", "setup", "--global", "--host", e.host); r.code != 0 {
		t.Fatalf("git setup: %+v", r)
	}
	if got := e.agent(true, work, "git", "config", "--global", "--get-regexp", `^url\.`); !strings.Contains(got, "url.coily::/git/"+e.host+"/.insteadof https://"+e.host+"/") {
		t.Fatalf("git setup wrote %q", got)
	}
	app := filepath.Join(work, "app")
	e.agent(true, work, "git", "clone", "--quiet", e.url("owner/app"), app)
	if fetches := e.gitRecords("git.fetch"); len(fetches) == 0 || fetches[len(fetches)-1].Details["bytes"] == "" ||
		fetches[len(fetches)-1].Principal != "local:"+currentUser(t) || fetches[len(fetches)-1].Details["remote"] != "app" {
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
		done, _ := e.background(review, "git", "push", "--force", "origin", "agent/y")
		id, list := e.pendingApproval()
		for _, s := range []string{`wants rule "git:review"`, "refs/heads/agent/y", " force +1 -1 confirm", fmt.Sprintf("Agent: forced %d ", i)} {
			if !strings.Contains(list, s) {
				t.Fatalf("coily approvals list does not show %q:\n%s", s, list)
			}
		}
		if strings.ContainsAny(list, "\x1b\x07") {
			t.Fatalf("coily approvals list passes the subject's control characters: %q", list)
		}
		approve(id)
		if err := waitErr(t, done); err != nil {
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

// consoleApprove approves id in the web console's API from node.
func (e *gitProxyEnv) consoleApprove(node *tsnet.Server, id string) {
	e.t.Helper()
	resp, err := consoleClient(node).Post(strings.TrimSuffix(e.console, "/")+"/api/approvals/"+id+"/approve", "", nil)
	if err != nil {
		e.t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		e.t.Fatalf("console approve: %d %s", resp.StatusCode, body)
	}
}

// cliApprove approves id with `coily approvals approve` from a node of
// the CLI's own on the tailnet (a tailnet user, not the requester).
func (e *gitProxyEnv) cliApprove(id string) {
	e.t.Helper()
	cmd := exec.Command(coilyBin, "--tsnet", "--server", "coily", "--control-url", e.net.ControlURL, "approvals", "approve", id, "--note", "forced on purpose")
	cmd.Env = append(os.Environ(), devnet.OfflineEnv()...)
	cmd.Env = append(cmd.Env, "HOME="+e.t.TempDir())
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "approved") {
		e.t.Fatalf("coily approvals approve: %v\n%s", err, out)
	}
}

// cliApproveRefused tries to approve id as cliApprove does, and must be
// refused: it is no longer pending.
func (e *gitProxyEnv) cliApproveRefused(id string) {
	e.t.Helper()
	cmd := exec.Command(coilyBin, "--tsnet", "--server", "coily", "--control-url", e.net.ControlURL, "approvals", "approve", id)
	cmd.Env = append(os.Environ(), devnet.OfflineEnv()...)
	cmd.Env = append(cmd.Env, "HOME="+e.t.TempDir())
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "no pending approval") {
		e.t.Fatalf("approving a withdrawn push: %v\n%s", err, out)
	}
}

// runCoilyIn runs the coily CLI in dir with env.
func runCoilyIn(t *testing.T, dir string, env []string, args ...string) cliRun {
	t.Helper()
	cmd := exec.Command(coilyBin, args...)
	var out, errb bytes.Buffer
	cmd.Dir, cmd.Env, cmd.Stdout, cmd.Stderr = dir, env, &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	code := 0
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return cliRun{code: code, stdout: out.String(), stderr: errb.String()}
}

func currentUser(t *testing.T) string {
	t.Helper()
	u, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	return u.Username
}

// TestGitProxyTailnet: an agent on another node of the tailnet reaches
// the proxy's port 7444 (its plain git through a loopback forwarder that
// dials through the node, so the server sees the node's identity): clone
// and push as tag:agent; a node whose principal the remote does not list
// is refused. A lockout refuses git on both transports and rejects a
// push that waits for an approval.
func TestGitProxyTailnet(t *testing.T) {
	e := startGitProxy(t, "")
	agentURL := forwarder(t, e.join("agent", "tag:agent"), "coily:7444")
	strangerURL := forwarder(t, e.join("guest", "tag:stranger"), "coily:7444")
	work := t.TempDir()

	if r := runCoilyIn(t, work, e.agentEnv(), "git", "setup", "--global", "--proxy-url", agentURL, "--host", e.host); r.code != 0 {
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
	if err := waitErr(t, done); err == nil {
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
	if err := waitErr(t, done); err == nil || !strings.Contains(err.Error(), "lockout") {
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
	if r := runCoilyIn(t, work, e.agentEnv(), "git", "setup", "--global", "--host", e.host); r.code != 0 {
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
	if r := runCoilyIn(t, work, e.agentEnv(), "git", "setup", "--global", "--host", e.host); r.code != 0 {
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
	if err := waitErr(t, done); err == nil {
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
