package gitremote

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"coily.dev/coily/client/statedir"
	"coily.dev/coily/internal/standin"
)

// The test binary is git-remote-coily too, called by that name through a
// link on git's PATH (helperEnv): git runs the helper the tests check.
func TestMain(m *testing.M) {
	if filepath.Base(os.Args[0]) == Name {
		os.Exit(Main())
	}
	os.Exit(m.Run())
}

// gitWorld is a stand-in git proxy on a state directory's git.sock and the
// environment that sends git's coily:: URLs to this package's helper.
type gitWorld struct {
	proxy *standin.Git
	state string
	env   []string
}

func newGitWorld(t *testing.T, opt standin.GitOptions) *gitWorld {
	t.Helper()
	standin.Need(t, "git", standin.GitHint)
	state := t.TempDir()
	w := &gitWorld{state: state, proxy: standin.GitSocket(t, opt, statedir.GitSocket(state))}
	bin := t.TempDir()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(self, filepath.Join(bin, Name)); err != nil {
		t.Fatal(err)
	}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GIT_") && !strings.HasPrefix(kv, "COILY_") && !strings.HasPrefix(kv, "PATH=") && !strings.HasPrefix(kv, "HOME=") {
			w.env = append(w.env, kv)
		}
	}
	w.env = append(w.env, "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"), "HOME="+t.TempDir(),
		"COILY_STATE_DIR="+state, "SANDBOX_RUNTIME=0", "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null", "GIT_TERMINAL_PROMPT=0",
		"GIT_AUTHOR_NAME=Agent", "GIT_AUTHOR_EMAIL=agent@example.invalid", "GIT_COMMITTER_NAME=Agent", "GIT_COMMITTER_EMAIL=agent@example.invalid")
	return w
}

// git runs git in dir with the world's environment and extra, and fails
// the test if it fails.
func (w *gitWorld) git(t *testing.T, dir string, extra []string, args ...string) string {
	t.Helper()
	out, err := w.try(t, dir, extra, args...)
	if err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

func (w *gitWorld) try(t *testing.T, dir string, extra []string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = dir
	cmd.Env = append(append([]string(nil), w.env...), extra...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func commit(t *testing.T, w *gitWorld, dir, file, text string) string {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, file), []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	w.git(t, dir, nil, "add", file)
	w.git(t, dir, nil, "commit", "--quiet", "-m", "add "+file)
	return strings.TrimSpace(w.git(t, dir, nil, "rev-parse", "HEAD"))
}

var listenLine = regexp.MustCompile(`git-remote-coily: /git/\S+ through \S+ on (127\.0\.0\.1:\d+)`)

// TestCloneFetchPushThroughSocket: with the real git, a clone, a push of
// a new branch and of main, and a fetch in another clone, all through
// coily:: on the local socket; each loopback listener is gone when git is
// done, and git's HTTP proxy settings do not take the requests elsewhere.
func TestCloneFetchPushThroughSocket(t *testing.T) {
	w := newGitWorld(t, standin.GitOptions{Repos: []string{"alice/app"}})
	url := "coily::/git/github.com/alice/app"
	// A proxy nobody listens on: were git to use it, every step would fail.
	proxied := []string{"http_proxy=http://127.0.0.1:9", "HTTP_PROXY=http://127.0.0.1:9", "ALL_PROXY=http://127.0.0.1:9"}

	work := filepath.Join(t.TempDir(), "work")
	w.git(t, "", proxied, "clone", "--quiet", url, work)
	head := commit(t, w, work, "README", "hello\n")
	out := w.git(t, work, append(proxied, "COILY_VERBOSE=1"), "push", "--quiet", "origin", "HEAD:refs/heads/main", "HEAD:refs/heads/agent/one")
	if got := w.proxy.Ref(t, "alice/app", "refs/heads/main"); got != head {
		t.Fatalf("main upstream = %q, want %s", got, head)
	}
	if got := w.proxy.Ref(t, "alice/app", "refs/heads/agent/one"); got != head {
		t.Fatalf("agent/one upstream = %q, want %s", got, head)
	}
	m := listenLine.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no listener line in the push's output:\n%s", out)
	}
	if c, err := net.DialTimeout("tcp", m[1], time.Second); err == nil {
		c.Close()
		t.Fatalf("the helper's listener %s still accepts after git exited", m[1])
	}

	other := filepath.Join(t.TempDir(), "other")
	w.git(t, "", nil, "clone", "--quiet", url, other)
	next := commit(t, w, other, "NEXT", "next\n")
	w.git(t, other, nil, "push", "--quiet", "origin", "main")
	w.git(t, work, nil, "fetch", "--quiet", "origin")
	if got := strings.TrimSpace(w.git(t, work, nil, "rev-parse", "origin/main")); got != next {
		t.Fatalf("fetched origin/main = %s, want %s", got, next)
	}
	for _, r := range w.proxy.Requests() {
		if !strings.HasPrefix(r, "GET /git/github.com/alice/app/info/refs?service=git-") && !strings.HasPrefix(r, "POST /git/github.com/alice/app/git-") {
			t.Errorf("the proxy got %q", r)
		}
	}
}

// TestHelperNoProcessLeft: once git is done, neither the helper nor git's
// transport is left running.
func TestHelperNoProcessLeft(t *testing.T) {
	w := newGitWorld(t, standin.GitOptions{Repos: []string{"alice/noleak"}})
	w.git(t, "", nil, "ls-remote", "coily::/git/github.com/alice/noleak")
	w.git(t, "", nil, "clone", "--quiet", "coily::/git/github.com/alice/noleak", filepath.Join(t.TempDir(), "c"))
	procs, err := filepath.Glob("/proc/[0-9]*/cmdline")
	if err != nil || len(procs) == 0 {
		t.Fatalf("no processes in /proc: %v", err)
	}
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err == nil && bytes.Contains(b, []byte("alice/noleak")) && (bytes.Contains(b, []byte(Name)) || bytes.Contains(b, []byte("remote-http"))) {
			t.Errorf("left running: %s: %q", p, b)
		}
	}
}

// TestSecretRequired: the loopback listener answers only requests that
// carry the helper's secret and name the repository's smart HTTP
// endpoints, and is closed when git's transport exits.
func TestSecretRequired(t *testing.T) {
	w := newGitWorld(t, standin.GitOptions{Repos: []string{"alice/app", "alice/other"}})
	stdin, feed := io.Pipe()
	addrs := make(chan [2]string, 1)
	var stderr bytes.Buffer
	done := make(chan int, 1)
	go func() {
		done <- Run(context.Background(), Config{Args: []string{Name, "origin", "/git/github.com/alice/app"},
			Getenv: envLookup(w.env), Environ: w.env, Stdin: stdin, Stdout: io.Discard, Stderr: &stderr,
			listening: func(addr, secret string) { addrs <- [2]string{addr, secret} }})
	}()
	a := <-addrs
	base := "http://" + a[0]
	get := func(path, auth string) int {
		t.Helper()
		req, _ := http.NewRequest("GET", base+path, nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	refs := "/git/github.com/alice/app/info/refs?service=git-upload-pack"
	bearer := "Bearer " + a[1]
	for _, tc := range []struct {
		path, auth string
		want       int
	}{
		{refs, "", http.StatusForbidden},
		{refs, "Bearer " + strings.Repeat("0", len(a[1])), http.StatusForbidden},
		{refs, "Basic " + a[1], http.StatusForbidden},
		{"/" + a[1] + refs, "", http.StatusForbidden},
		{refs, bearer, http.StatusOK},
		{"/git/github.com/alice/other/info/refs?service=git-upload-pack", bearer, http.StatusNotFound},
		{"/git/github.com/alice/app/../other/info/refs?service=git-upload-pack", bearer, http.StatusNotFound},
		{"/git/github.com/alice/app%2f..%2fother/info/refs?service=git-upload-pack", bearer, http.StatusNotFound},
		{"/git/github.com/alice/app/info/refs?service=git-upload-pack&x=1", bearer, http.StatusNotFound},
		{"/git/github.com/alice/app/info/refs", bearer, http.StatusNotFound},
		{"/git/github.com/alice/app/HEAD", bearer, http.StatusNotFound},
		{"/git/github.com/alice/app/objects/info/packs", bearer, http.StatusNotFound},
		{"/git/github.com/alice/app/git-upload-pack", bearer, http.StatusNotFound}, // a GET
	} {
		if got := get(tc.path, tc.auth); got != tc.want {
			t.Errorf("GET %s (auth %q…): %d, want %d", tc.path, tc.auth[:min(len(tc.auth), 8)], got, tc.want)
		}
	}
	// git's end of the session (a blank line, then end of input): its
	// transport exits.
	feed.Write([]byte("\n"))
	feed.Close()
	select {
	case code := <-done:
		if code != 0 {
			t.Errorf("helper exited %d: %s", code, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the helper did not exit when its input ended")
	}
	if c, err := net.DialTimeout("tcp", a[0], time.Second); err == nil {
		c.Close()
		t.Fatalf("listener %s still open after the helper returned", a[0])
	}
}

func envLookup(env []string) func(string) string {
	return func(k string) string {
		v := ""
		for _, kv := range env {
			if s, ok := strings.CutPrefix(kv, k+"="); ok {
				v = s
			}
		}
		return v
	}
}

// TestHostileAddressesRefused: an address after coily:: that could name
// anything but one repository on the proxy is refused before any
// listener or transport starts, with a message naming the address; the
// real git shows it.
func TestHostileAddressesRefused(t *testing.T) {
	for _, tc := range hostileAddresses {
		var stderr bytes.Buffer
		started := false
		code := Run(context.Background(), Config{Args: []string{Name, "origin", tc.addr}, Getenv: func(string) string { return "" },
			Stderr: &stderr, listening: func(string, string) { started = true }})
		if code != exitUsage || started || !strings.Contains(stderr.String(), "coily: refused git address") {
			t.Errorf("%q: exit %d, listener started %v, stderr %q", tc.addr, code, started, stderr.String())
		}
	}
	w := newGitWorld(t, standin.GitOptions{Repos: []string{"alice/app"}})
	for _, addr := range []string{
		"/git/github.com/alice/../../etc",
		"/git/github.com/alice%2fapp",
		"/git/github.com/a/b::https://evil.example/",
		"https://evil.example/alice/app",
	} {
		out, err := w.try(t, "", nil, "ls-remote", "coily::"+addr)
		if err == nil || !strings.Contains(out, "coily: refused git address") {
			t.Errorf("git ls-remote coily::%s: %v\n%s", addr, err, out)
		}
	}
	if len(w.proxy.Requests()) != 0 {
		t.Errorf("the proxy was asked: %q", w.proxy.Requests())
	}
}

// TestRefusalShown: the proxy's refusal line reaches the user's terminal
// (git itself prints only the status).
func TestRefusalShown(t *testing.T) {
	w := newGitWorld(t, standin.GitOptions{Repos: []string{"alice/app"}})
	out, err := w.try(t, "", nil, "ls-remote", "coily::/git/gitlab.com/alice/app")
	if err == nil || !strings.Contains(out, "coily: refused: policy-deny: the remote gitlab.com is not in the policy") {
		t.Fatalf("ls-remote of a host outside the policy: %v\n%s", err, out)
	}
}

// TestRoutesWithoutTransport: a route the helper cannot carry git over is
// refused with what to do, never taken for the local socket.
func TestRoutesWithoutTransport(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"COILY_SERVER": "coily.tail.ts.net"}, "coily git setup --server coily.tail.ts.net"},
		{map[string]string{"COILY_DEV": "/tmp/dev"}, "no git transport"},
		{map[string]string{"COILY_SERVER": "coily", "COILY_TSNET": "1"}, "no git transport"},
	} {
		var stderr bytes.Buffer
		code := Run(context.Background(), Config{Args: []string{Name, "origin", "/git/github.com/alice/app"},
			Getenv: func(k string) string { return tc.env[k] }, Stderr: &stderr, listening: func(string, string) { t.Error("listener started") }})
		if code != exitUsage || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want %q", tc.env, code, stderr.String(), tc.want)
		}
	}
}

// TestSandboxWithoutFolder: in a sandbox with no shared folder (or no
// key) git gets exit 69 and what is missing; the local socket is never
// tried.
func TestSandboxWithoutFolder(t *testing.T) {
	var stderr bytes.Buffer
	env := map[string]string{"SANDBOX_RUNTIME": "1", "COILY_MOUNT": t.TempDir()}
	code := Run(context.Background(), Config{Args: []string{Name, "origin", "/git/github.com/alice/app"},
		Getenv: func(k string) string { return env[k] }, Stderr: &stderr, listening: func(string, string) { t.Error("listener started") }})
	if code != exitUnreachable || !strings.Contains(stderr.String(), "git through the shared folder") {
		t.Fatalf("exit %d: %q", code, stderr.String())
	}
}

// TestUnreachable: no proxy socket is exit 69 and a message, not a hang.
func TestUnreachable(t *testing.T) {
	var stderr bytes.Buffer
	dir := t.TempDir()
	code := Run(context.Background(), Config{Args: []string{Name, "origin", "/git/github.com/alice/app"},
		Getenv: func(k string) string { return map[string]string{"COILY_STATE_DIR": dir}[k] }, Stderr: &stderr})
	if code != exitUnreachable || !strings.Contains(stderr.String(), "git proxy unreachable") {
		t.Fatalf("exit %d: %q", code, stderr.String())
	}
}
