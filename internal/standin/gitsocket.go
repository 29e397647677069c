package standin

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// GitSocket serves the git proxy's layout, plain HTTP/1.1 on the unix
// socket path with each repository at /git/HOST/PATH, until t's cleanup:
// `git http-backend` on the bare repository PATH of opt.Repos (PATH.git
// when PATH names none), pushes
// allowed (the proxy holds the credentials; opt.Token and opt.AuthRead are
// not used). A host not in opt.Hosts (default github.com) is refused as
// the proxy refuses: 403 with a text/plain line starting with the refusal
// code. Requests() lists "GET /git/HOST/PATH/info/refs?…" lines.
func GitSocket(t testing.TB, opt GitOptions, path string) *Git {
	t.Helper()
	g, backend := newGit(t, opt)
	g.Socket = path
	hosts := opt.Hosts
	if len(hosts) == 0 {
		hosts = []string{"github.com"}
	}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g.record(fmt.Sprintf("%s %s", r.Method, r.URL.RequestURI()))
		rest, ok := strings.CutPrefix(r.URL.Path, "/git/")
		host, repoPath, ok2 := strings.Cut(rest, "/")
		if !ok || !ok2 || r.URL.RawPath != "" {
			http.Error(w, "not-found: not a repository path of the git proxy", http.StatusNotFound)
			return
		}
		if !slices.Contains(hosts, host) {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			w.WriteHeader(http.StatusForbidden)
			fmt.Fprintf(w, "policy-deny: the remote %s is not in the policy\n", host)
			return
		}
		r2 := r.Clone(r.Context())
		r2.URL.Path = "/" + g.withSuffix(repoPath)
		backend(w, r2, "coily")
	})
	if err := serveUnix(t, path, h); err != nil {
		t.Fatalf("standin: %v", err)
	}
	return g
}

// withSuffix adds ".git" to the repository in path (OWNER/REPO/info/refs)
// when only the bare repository of that name exists, as GitHub answers
// for both names.
func (g *Git) withSuffix(path string) string {
	for _, end := range []string{"/info/refs", "/git-upload-pack", "/git-receive-pack"} {
		repo, ok := strings.CutSuffix(path, end)
		if !ok || strings.HasSuffix(repo, ".git") {
			continue
		}
		if _, err := os.Stat(g.Dir(repo)); err == nil {
			return repo + ".git" + end
		}
	}
	return path
}

// serveUnix serves h on a new unix socket at path until t's cleanup.
func serveUnix(t testing.TB, path string, h http.Handler) error {
	if len(path) > 100 {
		return fmt.Errorf("socket path %s too long for a unix socket: use a shorter directory", path)
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return fmt.Errorf("listen %s: %w", filepath.Base(path), err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		srv.Close()
		if err := <-done; err != nil && !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("standin: git socket: %v", err)
		}
	})
	return nil
}
