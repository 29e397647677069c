package gitproxy

import (
	"crypto/rand"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"coily.dev/coily/internal/standin"
)

// Requests refused before git runs: each a status and one text/plain
// line starting with its refusal code.
func TestRefusedRequests(t *testing.T) {
	e := newEnv(t, "")
	e.seed("owner/app")
	for _, c := range []struct {
		name, method, path, want string
		status                   int
	}{
		{"not in the policy", "GET", "/git/" + e.upstream + "/owner/other/info/refs?service=git-upload-pack", "policy-deny: ", 403},
		{"host not in the policy", "GET", "/git/example.com/owner/app/info/refs?service=git-upload-pack", "policy-deny: ", 403},
		{"dotdot", "GET", "/git/" + e.upstream + "/owner/x/../app/info/refs?service=git-upload-pack", "bad-request: ", 400},
		{"encoded slash", "GET", "/git/" + e.upstream + "/owner%2fapp/info/refs?service=git-upload-pack", "bad-request: ", 400},
		{"encoded dot", "GET", "/git/" + e.upstream + "/owner/%2e%2e/owner/app/info/refs?service=git-upload-pack", "bad-request: ", 400},
		{"backslash", "GET", "/git/" + e.upstream + "/owner\\app/info/refs?service=git-upload-pack", "bad-request: ", 400},
		{"other service", "GET", "/git/" + e.upstream + "/owner/app/info/refs?service=git-upload-archive", "bad-request: ", 400},
		{"dumb http", "GET", "/git/" + e.upstream + "/owner/app/HEAD", "bad-request: ", 400},
	} {
		t.Run(c.name, func(t *testing.T) {
			req, _ := http.NewRequest(c.method, e.srv.URL+"/", nil)
			req.URL.Opaque = c.path[:strings.IndexByte(c.path+"?", '?')]
			if i := strings.IndexByte(c.path, '?'); i >= 0 {
				req.URL.RawQuery = c.path[i+1:]
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body := readAll(resp)
			resp.Body.Close()
			if resp.StatusCode != c.status || !strings.HasPrefix(body, c.want) || strings.Count(body, "\n") != 1 ||
				!strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") {
				t.Fatalf("%s: %d %q, want %d %q…", c.path, resp.StatusCode, body, c.status, c.want)
			}
		})
	}
	if n := len(e.rec.events("call")); n < 8 {
		t.Errorf("%d refusals audited, want 8", n)
	}
	// A clone of a repository outside the policy fails with the refusal.
	out, err := e.try("", "clone", e.url("owner/other"), filepath.Join(t.TempDir(), "x"))
	if err == nil || !strings.Contains(out, "policy-deny") {
		t.Fatalf("clone outside the policy: err=%v\n%s", err, out)
	}
}

// An upstream that redirects is not followed: the fetch fails, and the
// credential goes nowhere else.
func TestUpstreamRedirectRefused(t *testing.T) {
	var elsewhere []string
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		elsewhere = append(elsewhere, r.Header.Get("Authorization"))
	}))
	defer target.Close()
	redirect := standin.TLS(t).Serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, target.URL+r.URL.RequestURI(), http.StatusFound)
	}), "localhost")
	e2 := newEnv(t, fmt.Sprintf(`    - name: moved
      url: https://localhost:%s/owner/app
      roles: [agent]
      credential: file:token
      ca_file: %s
      allow_cidrs: [127.0.0.0/8]
`, redirect.Port, redirect.CAFile))
	e2.upstream = "localhost:" + redirect.Port
	out, err := e2.try("", "clone", e2.url("owner/app"), filepath.Join(t.TempDir(), "x"))
	if err == nil || len(elsewhere) != 0 {
		t.Fatalf("redirect: err=%v, requests elsewhere %q\n%s", err, elsewhere, out)
	}
	if f := e2.rec.events("git.fetch"); len(f) != 1 || f[0].Decision != "refuse" {
		t.Fatalf("fetch records: %+v", f)
	}
}

// A push whose old value is not upstream's current one (another push got
// there between the agent's ref advertisement and its pack) is refused.
func TestRacingPushRefused(t *testing.T) {
	e := newEnv(t, "")
	e.seed("owner/app")
	work := filepath.Join(t.TempDir(), "work")
	e.git("", "clone", "--quiet", e.url("owner/app"), work)
	e.git(work, "checkout", "--quiet", "-b", "agent/x")
	e.commit(work, "a", "one")
	e.git(work, "push", "--quiet", "origin", "agent/x")
	e.commit(work, "b", "two")
	// Between the advertisement and the POST, another push moves agent/x.
	other := filepath.Join(t.TempDir(), "other")
	e.git("", "clone", "--quiet", "--branch", "agent/x", e.up.Dir("owner/app"), other)
	racer := e.commit(other, "c", "racer")
	e.mu.Lock()
	e.front = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == "POST" && strings.HasSuffix(r.URL.Path, "/git-receive-pack") {
			e.git(other, "push", "--quiet", e.up.Dir("owner/app"), "agent/x")
		}
		e.proxy.ServeHTTP(w, r)
	})
	e.mu.Unlock()
	out, err := e.try(work, "push", "origin", "agent/x")
	if err == nil || !strings.Contains(out, "not upstream's current value") {
		t.Fatalf("racing push: err=%v\n%s", err, out)
	}
	if got := e.up.Ref(t, "owner/app", "refs/heads/agent/x"); got != racer {
		t.Fatalf("upstream at %s, want the racer's %s", got, racer)
	}
}

// A push larger than the bound is refused cleanly, upstream unchanged.
func TestHugePushRefused(t *testing.T) {
	e := newEnv(t, "", func(c *Config) { c.MaxPushBytes = 256 << 10 })
	e.seed("owner/app")
	work := filepath.Join(t.TempDir(), "work")
	e.git("", "clone", "--quiet", e.url("owner/app"), work)
	e.git(work, "checkout", "--quiet", "-b", "agent/big")
	big := make([]byte, 2<<20)
	rand.Read(big)
	if err := os.WriteFile(filepath.Join(work, "big"), big, 0o644); err != nil {
		t.Fatal(err)
	}
	e.git(work, "add", "big")
	e.git(work, "commit", "--quiet", "-m", "big")
	if out, err := e.try(work, "push", "origin", "agent/big"); err == nil {
		t.Fatalf("huge push accepted:\n%s", out)
	}
	if got := e.up.Ref(t, "owner/app", "refs/heads/agent/big"); got != "" {
		t.Fatalf("huge push reached upstream: %s", got)
	}
}

// Packs git refuses never reach the hook: one whose objects are not the
// commands' (connectivity), and a thin pack whose base the caller never
// had (upstream does not have it either).
func TestBadPacksRefused(t *testing.T) {
	e := newEnv(t, "")
	e.seed("owner/app")
	side := filepath.Join(t.TempDir(), "side")
	e.git("", "init", "--quiet", "--initial-branch=main", side)
	base := e.commit(side, "f", strings.Repeat("base line\n", 200))
	tip := e.commit(side, "f", strings.Repeat("base line\n", 200)+"tip\n")
	for _, c := range []struct {
		name, newOID, revs string
		thin               bool
	}{
		{"objects do not match", tip, base + "\n", false},
		{"thin pack on an unknown base", tip, tip + "\n^" + base + "\n", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			args := []string{"pack-objects", "--stdout", "--revs"}
			if c.thin {
				args = append(args, "--thin")
			}
			pack := e.gitIn(side, c.revs, args...)
			out := e.pushRaw(t, "owner/app", c.newOID, "refs/heads/agent/bad", pack)
			if strings.Contains(out, "ok refs/heads/agent/bad") {
				t.Fatalf("bad pack accepted: %q", out)
			}
			if got := e.up.Ref(t, "owner/app", "refs/heads/agent/bad"); got != "" {
				t.Fatalf("bad pack reached upstream: %s", got)
			}
			if r := e.lastPush(); r.Decision != "refuse" {
				t.Fatalf("record: %+v", r)
			}
		})
	}
}

// gitIn runs git in dir with stdin and returns its output.
func (e *env) gitIn(dir, stdin string, args ...string) []byte {
	e.t.Helper()
	cmd := gitCmd(dir, args...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.Output()
	if err != nil {
		e.t.Fatalf("git %v: %v", args, err)
	}
	return out
}

// The proxy runs git's services itself, as git http-backend would: a
// request body that is not the service's, or a Git-Protocol header that
// is not a short printable line, is refused before git runs; the
// advertisement starts as gitprotocol-http(5) says, for v0 and for v2.
func TestServiceRequests(t *testing.T) {
	e := newEnv(t, "")
	e.seed("owner/app")
	base := e.url("owner/app")
	for _, c := range []struct {
		name, method, path, ctype, proto string
		status                           int
		want                             string
	}{
		{"fetch refs v0", "GET", "/info/refs?service=git-upload-pack", "", "", 200, "001e# service=git-upload-pack\n0000"},
		{"fetch refs v2", "GET", "/info/refs?service=git-upload-pack", "", "version=2", 200, "000eversion 2\n"},
		{"fetch refs v2 among others", "GET", "/info/refs?service=git-upload-pack", "", "a=b:version=2", 200, "000eversion 2\n"},
		{"fetch refs, not v2", "GET", "/info/refs?service=git-upload-pack", "", "version=02", 200, "001e# service=git-upload-pack\n0000"},
		{"push refs", "GET", "/info/refs?service=git-receive-pack", "", "", 200, "001f# service=git-receive-pack\n0000"},
		{"fetch, no content type", "POST", "/git-upload-pack", "", "", 400, "bad-request: "},
		{"fetch, push's content type", "POST", "/git-upload-pack", "application/x-git-receive-pack-request", "", 400, "bad-request: "},
		{"push, fetch's content type", "POST", "/git-receive-pack", "application/x-git-upload-pack-request", "", 400, "bad-request: "},
		{"Git-Protocol too long", "GET", "/info/refs?service=git-upload-pack", "", "version=2:" + strings.Repeat("x", 300), 400, "bad-request: "},
		{"Git-Protocol not ASCII", "GET", "/info/refs?service=git-upload-pack", "", "version=2:\xff", 400, "bad-request: "},
		{"Git-Protocol with a tab", "POST", "/git-upload-pack", "application/x-git-upload-pack-request", "version=2\tx", 400, "bad-request: "},
	} {
		t.Run(c.name, func(t *testing.T) {
			req, err := http.NewRequest(c.method, base+c.path, strings.NewReader("0000"))
			if err != nil {
				t.Fatal(err)
			}
			if c.ctype != "" {
				req.Header.Set("Content-Type", c.ctype)
			}
			if c.proto != "" {
				req.Header.Set("Git-Protocol", c.proto)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body := readAll(resp)
			resp.Body.Close()
			if resp.StatusCode != c.status || !strings.HasPrefix(body, c.want) {
				t.Fatalf("%d %q, want %d %q…", resp.StatusCode, body, c.status, c.want)
			}
			if c.status == 200 && resp.Header.Get("Content-Type") != "application/x-"+strings.TrimPrefix(c.path, "/info/refs?service=")+"-advertisement" {
				t.Fatalf("content type %q", resp.Header.Get("Content-Type"))
			}
		})
	}
}
