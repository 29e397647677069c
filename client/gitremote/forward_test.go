package gitremote

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// hostileProxy is a proxy on a unix socket that answers with answer and
// records the headers it was sent.
type hostileProxy struct {
	mu   sync.Mutex
	seen http.Header
}

func forwarderTo(t *testing.T, answer http.HandlerFunc) (*httptest.Server, *hostileProxy, *bytes.Buffer) {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "git.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	p := &hostileProxy{}
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.mu.Lock()
		p.seen = r.Header.Clone()
		p.mu.Unlock()
		answer(w, r)
	}))
	up.Listener.Close()
	up.Listener = ln
	up.Start()
	t.Cleanup(up.Close)
	var stderr bytes.Buffer
	dial := func(ctx context.Context) (net.Conn, error) { return (&net.Dialer{}).DialContext(ctx, "unix", sock) }
	f := newForwarder(Repo{Host: "github.com", Path: "alice/app"}, "s3cret", socketTransport(dial), &stderr)
	srv := httptest.NewUnstartedServer(f)
	srv.Config.MaxHeaderBytes = maxHeaderBytes
	srv.Start()
	t.Cleanup(srv.Close)
	return srv, p, &stderr
}

func askRefs(t *testing.T, srv *httptest.Server, h http.Header) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", srv.URL+"/git/github.com/alice/app/info/refs?service=git-receive-pack", nil)
	for k, v := range h {
		req.Header[k] = v
	}
	req.Header.Set("Authorization", "Bearer s3cret")
	resp, err := http.DefaultTransport.(*http.Transport).RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// TestForwardedHeaders: only git's protocol headers reach the proxy (not
// the secret, not a cookie or Authorization git's configuration adds), and
// only content headers come back (no cookie, challenge or location).
func TestForwardedHeaders(t *testing.T) {
	srv, p, _ := forwarderTo(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Set-Cookie", "session=x")
		w.Header().Set("Location", "https://evil.example/")
		w.Header().Set("WWW-Authenticate", "Basic")
		w.Header().Set("Content-Type", "application/x-git-receive-pack-advertisement")
		w.Header().Set("Cache-Control", "no-cache")
		io.WriteString(w, "0000")
	})
	resp, body := askRefs(t, srv, http.Header{"Git-Protocol": {"version=2"}, "Cookie": {"a=b"}, "X-Forwarded-For": {"1.2.3.4"},
		"Proxy-Authorization": {"Basic eA=="}, "User-Agent": {"git/2.39"}})
	if resp.StatusCode != 200 || body != "0000" {
		t.Fatalf("answer %d %q", resp.StatusCode, body)
	}
	p.mu.Lock()
	seen := p.seen
	p.mu.Unlock()
	for k := range seen {
		switch k {
		case "Git-Protocol", "User-Agent", "Accept-Encoding", "Content-Length":
		default:
			t.Errorf("the proxy was sent %s: %q", k, seen[k])
		}
	}
	if seen.Get("Git-Protocol") != "version=2" {
		t.Errorf("Git-Protocol not passed: %v", seen)
	}
	for _, k := range []string{"Set-Cookie", "Location", "WWW-Authenticate"} {
		if v := resp.Header.Get(k); v != "" {
			t.Errorf("git was sent %s: %q", k, v)
		}
	}
	if resp.Header.Get("Content-Type") != "application/x-git-receive-pack-advertisement" || resp.Header.Get("Cache-Control") != "no-cache" {
		t.Errorf("content headers lost: %v", resp.Header)
	}
}

// TestHostileProxyAnswers: a redirect is not passed on for git to follow,
// a challenge does not reach git (which would ask a credential helper or
// prompt for a password), headers beyond the bound are refused, and a
// refusal's first line is printed once, its control characters escaped.
func TestHostileProxyAnswers(t *testing.T) {
	for _, tc := range []struct {
		name       string
		answer     http.HandlerFunc
		wantStatus int
		wantErr    string
	}{
		{"redirect", func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, "https://evil.example/alice/app/info/refs", http.StatusFound)
		}, http.StatusBadGateway, "a redirect: not followed"},
		{"permanent redirect", func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, "http://127.0.0.1:1/", http.StatusPermanentRedirect)
		}, http.StatusBadGateway, "a redirect: not followed"},
		{"challenge", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("WWW-Authenticate", `Basic realm="x"`)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
		}, http.StatusForbidden, "coily: refused: unauthorized"},
		{"proxy challenge", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Proxy-Authenticate", `Basic realm="x"`)
			w.WriteHeader(http.StatusProxyAuthRequired)
		}, http.StatusForbidden, "coily: refused: 403 Forbidden"},
		{"huge header", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-Big", strings.Repeat("a", maxHeaderBytes+1))
		}, http.StatusBadGateway, "coily: git proxy:"},
		{"refusal with escapes", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/plain")
			w.WriteHeader(http.StatusForbidden)
			io.WriteString(w, "policy-deny: \x1b[2Aapproved\rcoily: ok\nsecond line\n")
		}, http.StatusForbidden, `coily: refused: policy-deny: \x1b[2Aapproved\rcoily: ok` + "\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, _, stderr := forwarderTo(t, tc.answer)
			resp, _ := askRefs(t, srv, nil)
			if resp.StatusCode != tc.wantStatus {
				t.Errorf("status %d, want %d", resp.StatusCode, tc.wantStatus)
			}
			for _, k := range []string{"Location", "WWW-Authenticate", "Proxy-Authenticate"} {
				if v := resp.Header.Get(k); v != "" {
					t.Errorf("git was sent %s: %q", k, v)
				}
			}
			if !strings.Contains(stderr.String(), tc.wantErr) {
				t.Errorf("stderr %q, want %q", stderr.String(), tc.wantErr)
			}
			if strings.Count(stderr.String(), "\n") > 1 || strings.ContainsAny(stderr.String(), "\x1b\r") {
				t.Errorf("stderr not one escaped line: %q", stderr.String())
			}
		})
	}
}

// TestRequestHeadersBounded: git's request headers beyond the bound are
// refused by the listener, never forwarded.
func TestRequestHeadersBounded(t *testing.T) {
	var called atomic.Bool
	srv, _, _ := forwarderTo(t, func(w http.ResponseWriter, r *http.Request) { called.Store(true) })
	resp, _ := askRefs(t, srv, http.Header{"User-Agent": {strings.Repeat("a", 2*maxHeaderBytes)}})
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge || called.Load() {
		t.Fatalf("status %d, forwarded %v", resp.StatusCode, called.Load())
	}
}
