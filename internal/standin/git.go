package standin

import (
	"context"
	"crypto/subtle"
	"fmt"
	"io"
	"net/http"
	"net/http/cgi"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"coily.dev/coily/internal/testlog"
)

// GitHint says how to install git.
const GitHint = "install the Debian package git"

// GitOptions configures GitHTTP.
type GitOptions struct {
	// Token is the Basic auth password (any user name) that authorises
	// push; "" refuses every push.
	Token string
	// Repos are the bare repositories to create under the project root,
	// e.g. "owner/repo.git" (".git" is added when missing). They start
	// empty, with HEAD at refs/heads/main.
	Repos []string
	// Hosts are more names for the server's certificate.
	Hosts []string
	// AuthRead requires the token for fetch and clone too.
	AuthRead bool
}

// Git is `git http-backend` served over TLS by GitHTTP.
type Git struct {
	*Server        // GitHTTP's; nil for GitSocket
	Socket  string // GitSocket's unix socket; "" for GitHTTP
	Token   string
	Root    string // GIT_PROJECT_ROOT, holding the bare repositories

	mu       sync.Mutex
	requests []string
	received map[string]int64 // bytes of request bodies GitHTTP read, by service
}

// GitHTTP serves the smart HTTP protocol of `git http-backend` (through
// net/http/cgi) over TLS on 127.0.0.1 until t's cleanup. A request whose
// Basic auth password matches opt.Token runs the backend with REMOTE_USER
// set to its user name, which enables push; a push without it (or with
// another password) is answered 401 with a Basic challenge, so git asks
// its credential helper.
func GitHTTP(t testing.TB, opt GitOptions) *Git {
	t.Helper()
	g, backend := newGit(t, opt)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		user, ok := g.user(r)
		push := isPush(r)
		if !ok && (push || opt.AuthRead) {
			g.record(fmt.Sprintf("401 %s %s", r.Method, r.URL.RequestURI()))
			w.Header().Set("WWW-Authenticate", `Basic realm="standin git"`)
			http.Error(w, "authentication required", http.StatusUnauthorized)
			return
		}
		g.record(fmt.Sprintf("%s %s user=%q", r.Method, r.URL.RequestURI(), user))
		r.Body = &countingBody{ReadCloser: r.Body, g: g, service: path.Base(r.URL.Path)}
		backend(w, r, user)
	})
	g.Server = TLS(t).Serve(t, h, opt.Hosts...)
	return g
}

// newGit makes the bare repositories of opt and returns the handler that
// runs `git http-backend` on a request, as user when not "" (which
// enables push).
func newGit(t testing.TB, opt GitOptions) (*Git, func(w http.ResponseWriter, r *http.Request, user string)) {
	t.Helper()
	gitPath := Need(t, "git", GitHint)
	backend, err := httpBackend(gitPath)
	if err != nil {
		t.Fatalf("standin: %v", err)
	}
	g := &Git{Token: opt.Token, Root: t.TempDir()}
	for _, name := range opt.Repos {
		if err := initBare(gitPath, g.Dir(name)); err != nil {
			t.Fatalf("standin: %v", err)
		}
	}
	home := t.TempDir()
	cgiEnv := []string{
		"GIT_PROJECT_ROOT=" + g.Root,
		"GIT_HTTP_EXPORT_ALL=1",
		"GIT_CONFIG_NOSYSTEM=1",
		"HOME=" + home,
	}
	return g, func(w http.ResponseWriter, r *http.Request, user string) {
		env := cgiEnv
		if user != "" {
			env = append(env[:len(env):len(env)], "REMOTE_USER="+user)
		}
		(&cgi.Handler{Path: backend, Env: env, Stderr: testlog.T(t)}).ServeHTTP(w, r)
	}
}

// Dir returns the directory of the bare repository name.
func (g *Git) Dir(name string) string {
	return filepath.Join(g.Root, filepath.FromSlash(bareName(name)))
}

// RepoURL returns the https URL of the repository name.
func (g *Git) RepoURL(name string) string {
	return g.URL + "/" + bareName(name)
}

// Env returns the environment that makes git trust the server and never
// prompt (credentials then come only from a credential helper).
func (g *Git) Env() []string {
	return []string{"GIT_SSL_CAINFO=" + g.CAFile, "GIT_TERMINAL_PROMPT=0", "GIT_CONFIG_NOSYSTEM=1"}
}

// Ref returns the commit that ref (e.g. "refs/heads/main") names in the
// bare repository name, or "" if it does not exist.
func (g *Git) Ref(t testing.TB, name, ref string) string {
	t.Helper()
	out, err := exec.Command("git", "--git-dir", g.Dir(name), "rev-parse", "--verify", "--quiet", ref).Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

// Requests returns one line per request: "GET /owner/repo.git/info/refs?
// service=git-upload-pack user=\"\"", or "401 POST …" for refused ones.
func (g *Git) Requests() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]string(nil), g.requests...)
}

// Received returns the bytes of the request bodies GitHTTP has read for
// service ("git-receive-pack", "git-upload-pack"; "" for all), as they
// came over the wire (before any gzip is inflated).
func (g *Git) Received(service string) int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	if service != "" {
		return g.received[service]
	}
	var n int64
	for _, v := range g.received {
		n += v
	}
	return n
}

// countingBody adds what is read of a request body to its Git's count.
type countingBody struct {
	io.ReadCloser
	g       *Git
	service string
}

func (c *countingBody) Read(p []byte) (int, error) {
	n, err := c.ReadCloser.Read(p)
	c.g.mu.Lock()
	if c.g.received == nil {
		c.g.received = map[string]int64{}
	}
	c.g.received[c.service] += int64(n)
	c.g.mu.Unlock()
	return n, err
}

func (g *Git) record(line string) {
	g.mu.Lock()
	g.requests = append(g.requests, line)
	g.mu.Unlock()
}

// user returns the Basic auth user name of r if its password is the
// token.
func (g *Git) user(r *http.Request) (string, bool) {
	user, pass, ok := r.BasicAuth()
	if !ok || g.Token == "" || subtle.ConstantTimeCompare([]byte(pass), []byte(g.Token)) != 1 {
		return "", false
	}
	if user == "" {
		user = "git"
	}
	return user, true
}

// isPush reports whether r is part of a push: the ref advertisement or
// the pack upload of git-receive-pack.
func isPush(r *http.Request) bool {
	return r.URL.Query().Get("service") == "git-receive-pack" || strings.HasSuffix(r.URL.Path, "/git-receive-pack")
}

func bareName(name string) string {
	name = strings.Trim(name, "/")
	if !strings.HasSuffix(name, ".git") {
		name += ".git"
	}
	return name
}

// httpBackend returns the path of git-http-backend next to git.
func httpBackend(gitPath string) (string, error) {
	out, err := exec.Command(gitPath, "--exec-path").Output()
	if err != nil {
		return "", fmt.Errorf("git --exec-path: %w", err)
	}
	p := filepath.Join(strings.TrimSpace(string(out)), "git-http-backend")
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("git-http-backend: %w", err)
	}
	return p, nil
}

func initBare(gitPath, dir string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, gitPath, "init", "--quiet", "--bare", "--initial-branch=main", dir).CombinedOutput()
	if err != nil {
		return fmt.Errorf("git init --bare %s: %w: %s", dir, err, out)
	}
	return nil
}
