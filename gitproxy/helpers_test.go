package gitproxy

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"coily.dev/coily/access"
	"coily.dev/coily/approvals"
	"coily.dev/coily/audit"
	"coily.dev/coily/internal/standin"
	"coily.dev/coily/keystore"
	"coily.dev/coily/policy"
	coilyv1 "coily.dev/coily/proto/coily/v1"
	"coily.dev/coily/refusal"
)

// fakeGate admits every request as one caller under one policy (the
// identity paths are access's, tested there); it records refusals.
type fakeGate struct {
	mu     sync.Mutex
	caller access.Caller
	pol    *policy.Policy
	rec    *records
}

func (g *fakeGate) Admit(ctx context.Context, a access.Action) (context.Context, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return access.WithCall(ctx, g.caller, g.pol), nil
}

// as makes c the caller of the requests that follow.
func (g *fakeGate) as(c access.Caller) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.caller = c
}

func (g *fakeGate) Refuse(ctx context.Context, c access.Caller, method string, err error) error {
	r := access.CallerRecord(c, method, "call", refusal.As(err).Msg)
	r.Decision, r.Code = "refuse", string(refusal.As(err).Code)
	g.rec.add(r)
	return err
}

type records struct {
	mu  sync.Mutex
	all []audit.Record
}

func (r *records) add(rec audit.Record) audit.Record {
	r.mu.Lock()
	defer r.mu.Unlock()
	rec.ID = fmt.Sprintf("A%d", len(r.all)+1)
	r.all = append(r.all, rec)
	return rec
}

func (r *records) events(event string) []audit.Record {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []audit.Record
	for _, x := range r.all {
		if x.Event == event {
			out = append(out, x)
		}
	}
	return out
}

// env is one test's upstream (standin's git http-backend over TLS), the
// proxy in front of it and an agent's git that knows only the proxy.
type env struct {
	t        testing.TB
	up       *standin.Git
	proxy    *Proxy
	srv      *httptest.Server
	rec      *records
	queue    *approvals.Queue
	stopped  error
	front    http.Handler // in front of the proxy, when set
	mu       sync.Mutex
	home     string
	upstream string              // "localhost:PORT"
	waiting  []*coilyv1.Approval // what Config.Waiting heard
	timeout  time.Duration       // bounds each of the agent's gits (0: 2m)
}

const testToken = "upstream-token-7f3a"

// newEnv's policyTail adds remotes after "app"; {port} and {ca} in it
// are the upstream's port and CA file.
func newEnv(t testing.TB, policyTail string, opts ...func(*Config)) *env {
	t.Helper()
	standin.Need(t, "git", standin.GitHint)
	up := standin.GitHTTP(t, standin.GitOptions{Token: testToken, Repos: []string{"owner/app", "owner/other"}, Hosts: []string{"localhost"}})
	e := &env{t: t, up: up, rec: &records{}, home: t.TempDir(), upstream: "localhost:" + up.Port}
	policyTail = strings.NewReplacer("{port}", up.Port, "{ca}", up.CAFile).Replace(policyTail)
	pol, err := policy.Parse("p.yaml", []byte(fmt.Sprintf(`version: 1
roles:
  agent: {permissions: [exec]}
grants:
  - {principals: ["tag:agent"], roles: [agent]}
git:
  remotes:
    - name: app
      url: https://localhost:%s/owner/app
      roles: [agent]
      credential: file:token
      ca_file: %s
      allow_cidrs: [127.0.0.0/8, "::1/128"]
      push:
        refs: ["refs/heads/agent/*"]
        create: allow
        fast_forward: allow
        force: confirm
        delete: deny
        confirm_timeout: 1m
%s`, up.Port, up.CAFile, policyTail)))
	if err != nil {
		t.Fatal(err)
	}
	e.queue = approvals.New(time.Now, nil, nil)
	cfg := Config{Dir: t.TempDir(), Gate: &fakeGate{caller: access.Caller{Principal: "tag:agent", Transport: "test"}, pol: pol, rec: e.rec},
		Stopped:   func(string) error { e.mu.Lock(); defer e.mu.Unlock(); return e.stopped },
		Record:    func(_ context.Context, r audit.Record) (audit.Record, error) { return e.rec.add(r), nil },
		Approvals: e.queue, UpstreamTimeout: 30 * time.Second,
		Waiting: func(tk *approvals.Ticket) {
			e.mu.Lock()
			defer e.mu.Unlock()
			e.waiting = append(e.waiting, tk.Snapshot())
		},
		Keystore: tokenStore{}}
	for _, o := range opts {
		o(&cfg)
	}
	e.proxy, err = New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e.mu.Lock()
		h := e.front
		e.mu.Unlock()
		if h == nil {
			h = e.proxy
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(e.srv.Close)
	return e
}

// url is the proxy's URL of an upstream repository.
func (e *env) url(repo string) string { return e.srv.URL + "/git/" + e.upstream + "/" + repo }

// git runs the agent's git (no credential, no config) and fails the test
// on error.
func (e *env) git(dir string, args ...string) string {
	e.t.Helper()
	out, err := e.try(dir, args...)
	if err != nil {
		e.t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

func (e *env) try(dir string, args ...string) (string, error) {
	timeout := e.timeout
	if timeout == 0 {
		timeout = 2 * time.Minute
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = dir
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + e.home, "GIT_CONFIG_NOSYSTEM=1", "GIT_TERMINAL_PROMPT=0",
		"GIT_AUTHOR_NAME=Agent", "GIT_AUTHOR_EMAIL=agent@example.com", "GIT_COMMITTER_NAME=Agent",
		"GIT_COMMITTER_EMAIL=agent@example.com", "LC_ALL=C"}
	out, err := cmd.CombinedOutput()
	if strings.Contains(string(out), testToken) {
		e.t.Fatalf("the agent's git saw the upstream token:\n%s", out)
	}
	return string(out), err
}

// seed gives the upstream repository a first commit on main, pushed
// directly to its directory.
func (e *env) seed(repo string) {
	e.t.Helper()
	work := filepath.Join(e.t.TempDir(), "seed")
	e.git("", "init", "--quiet", "--initial-branch=main", work)
	e.commit(work, "README", "first")
	e.git(work, "push", "--quiet", e.up.Dir(repo), "main")
}

// commit writes name and commits it; it returns the commit.
func (e *env) commit(work, name, msg string) string {
	e.t.Helper()
	if err := os.WriteFile(filepath.Join(work, name), []byte(msg+"\n"), 0o644); err != nil {
		e.t.Fatal(err)
	}
	e.git(work, "add", name)
	e.git(work, "commit", "--quiet", "-m", msg)
	return strings.TrimSpace(e.git(work, "rev-parse", "HEAD"))
}

// approveNext decides the next approval that waits: verdict by the owner.
func (e *env) approveNext(v coilyv1.Verdict) <-chan *coilyv1.Approval {
	ch, cancel := e.queue.Watch()
	got := make(chan *coilyv1.Approval, 1)
	go func() {
		defer cancel()
		for a := range ch {
			if a.GetState() == coilyv1.ApprovalState_APPROVAL_STATE_PENDING {
				if _, err := e.queue.Decide(a.GetId(), "tag:owner", v, ""); err == nil {
					got <- a
					return
				}
			}
		}
	}()
	return got
}

// lastPush is the last git.push record.
func (e *env) lastPush() audit.Record {
	e.t.Helper()
	all := e.rec.events("git.push")
	if len(all) == 0 {
		e.t.Fatal("no git.push record")
	}
	return all[len(all)-1]
}

func readAll(resp *http.Response) string {
	var b strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := resp.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			return b.String()
		}
	}
}

func gitCmd(dir string, args ...string) *exec.Cmd {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "GIT_CONFIG_NOSYSTEM=1", "HOME=" + dir}
	return cmd
}

// tokenStore is a keystore holding the upstream's token under every name.
type tokenStore struct{}

func (tokenStore) Fetch(_ context.Context, refs map[string]keystore.Ref) (*keystore.Set, error) {
	out := &keystore.Set{Values: map[string]string{}}
	for k := range refs {
		out.Values[k] = testToken
	}
	return out, nil
}

// pushRaw posts to repo's receive-pack one command creating ref at oid,
// with pack as the pack, as git would but unchecked, and returns the
// answer.
func (e *env) pushRaw(t *testing.T, repo, oid, ref string, pack []byte) string {
	t.Helper()
	var body bytes.Buffer
	cmd := fmt.Sprintf("%s %s %s\x00report-status\n", strings.Repeat("0", 40), oid, ref)
	fmt.Fprintf(&body, "%04x%s0000", len(cmd)+4, cmd)
	body.Write(pack)
	resp, err := http.Post(e.url(repo)+"/git-receive-pack", "application/x-git-receive-pack-request", &body)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	return readAll(resp)
}
