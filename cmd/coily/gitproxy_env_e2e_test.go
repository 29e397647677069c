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
	"coily.dev/coily/internal/devnet"
	"coily.dev/coily/internal/standin"
	"coily.dev/coily/internal/testlog"
)

// gitProxyPolicy serves two remotes of one upstream: app (a force push
// refused) for local operators and tag:agent, review (a force push waits
// for an approval) for local operators only. The tailnet's owner node
// and its users approve. Local operators run the command rules that
// follow it, and relay for sandbox demo, whose git is tag:agent's.
const gitProxyPolicy = `version: 1
roles:
  operator: {permissions: [exec, lockout, unlock, pause, resume, status, approve, relay, keys], commands: ["*"], sandboxes: [demo]}
  owner: {permissions: [status, approve, lockout, unlock]}
  approver: {permissions: [status, approve]}
  agent: {permissions: [exec]}
  stranger: {permissions: [exec]}
grants:
  - {principals: ["tag:owner"], roles: [owner]}
  - {principals: ["tag:agent", "sandbox:demo"], roles: [agent]}
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
	done, interrupt, _ := e.backgroundOutput(dir, argv...)
	return done, interrupt
}

// backgroundOutput is background, with what the command says so far.
func (e *gitProxyEnv) backgroundOutput(dir string, argv ...string) (<-chan error, func(), *testlog.Buffer) {
	cmd := exec.Command(argv[0], argv[1:]...)
	out := new(testlog.Buffer)
	cmd.Dir, cmd.Env, cmd.Stdout, cmd.Stderr = dir, e.agentEnv(), out, out
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
	return done, func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGINT) }, out
}

// waitSaid waits until out holds want (the agent's command says it while
// it runs).
func (e *gitProxyEnv) waitSaid(out *testlog.Buffer, want string) {
	e.t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(out.String(), want); {
		if time.Now().After(deadline) {
			e.t.Fatalf("the agent's command does not say %q:\n%s", want, out)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func waitGitAgent(t *testing.T, ch <-chan error) error {
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

// gitNodeClient is an HTTP client whose connections go through node.
func gitNodeClient(node *tsnet.Server) *http.Client {
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

// gitForwarder listens on loopback and relays each connection to addr
// through node, so that the server sees the node's identity.
func gitForwarder(t *testing.T, node *tsnet.Server, addr string) string {
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

// consoleApprove approves id in the web console's API from node.
func (e *gitProxyEnv) consoleApprove(node *tsnet.Server, id string) {
	e.t.Helper()
	resp, err := gitNodeClient(node).Post(strings.TrimSuffix(e.console, "/")+"/api/approvals/"+id+"/approve", "", nil)
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

// runCoilyGit runs the coily CLI in dir with env.
func runCoilyGit(t *testing.T, dir string, env []string, args ...string) cliRun {
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

func gitTestUser(t *testing.T) string {
	t.Helper()
	u, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	return u.Username
}
