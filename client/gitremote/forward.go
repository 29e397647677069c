package gitremote

import (
	"context"
	"crypto/subtle"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"time"

	"coily.dev/coily/visible"
)

// maxHeaderBytes bounds the headers of a request from git and of an
// answer from the proxy.
const maxHeaderBytes = 64 << 10

// maxRefusal bounds the part of a refusal's body the helper reads to
// print its first line.
const maxRefusal = 1024

// Headers passed each way; every other header is dropped. Nothing git's
// configuration adds (an Authorization or a cookie meant for another
// host) reaches the proxy, and no challenge, redirect or cookie of the
// proxy's reaches git.
var (
	requestHeaders  = []string{"Accept", "Accept-Encoding", "Content-Encoding", "Content-Type", "Git-Protocol", "User-Agent"}
	responseHeaders = []string{"Cache-Control", "Content-Encoding", "Content-Length", "Content-Type", "Expires", "Pragma"}
)

// forwarder is the loopback HTTP server git's own HTTP transport talks to:
// it takes only requests that carry the secret and name one of the smart
// HTTP endpoints of the one repository, and streams each to the proxy.
type forwarder struct {
	secret string // the bearer token git sends (http.extraHeader)
	repo   Repo
	proxy  *httputil.ReverseProxy
	stderr io.Writer

	once sync.Once // the first refusal or failure is printed, the rest are git's to report
}

// socketTransport reaches the proxy dialled by dial, which serves the
// layout /git/HOST/PATH over plain HTTP/1.1.
func socketTransport(dial func(ctx context.Context) (net.Conn, error)) http.RoundTripper {
	return &http.Transport{
		DialContext:            func(ctx context.Context, _, _ string) (net.Conn, error) { return dial(ctx) },
		MaxResponseHeaderBytes: maxHeaderBytes,
		DisableCompression:     true,
		ResponseHeaderTimeout:  0, // a push waits on the proxy's checks and approvals
		IdleConnTimeout:        30 * time.Second,
	}
}

// newForwarder forwards to the proxy through transport (socketTransport,
// folderTransport).
func newForwarder(repo Repo, secret string, transport http.RoundTripper, stderr io.Writer) *forwarder {
	f := &forwarder{secret: secret, repo: repo, stderr: stderr}
	f.proxy = &httputil.ReverseProxy{
		Rewrite:        f.rewrite,
		Transport:      transport,
		FlushInterval:  -1, // stream: git reads progress as it comes
		ModifyResponse: f.modifyResponse,
		ErrorHandler:   f.fail,
	}
	return f
}

func (f *forwarder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), []byte("Bearer "+f.secret)) != 1 {
		http.Error(w, "forbidden", http.StatusForbidden)
		return
	}
	if !f.allowed(r) {
		http.Error(w, "not found", http.StatusNotFound)
		return
	}
	f.proxy.ServeHTTP(w, r)
}

// allowed says whether r is one of the smart HTTP requests git makes of
// the repository: the ref advertisement, or a fetch's or a push's POST.
func (f *forwarder) allowed(r *http.Request) bool {
	if r.URL.RawPath != "" || r.URL.Fragment != "" {
		return false
	}
	rest, ok := strings.CutPrefix(r.URL.Path, f.repo.ProxyPath()+"/")
	if !ok {
		return false
	}
	switch {
	case r.Method == http.MethodGet && rest == "info/refs":
		q := r.URL.RawQuery
		return q == "service=git-upload-pack" || q == "service=git-receive-pack"
	case r.Method == http.MethodPost && (rest == "git-upload-pack" || rest == "git-receive-pack"):
		return r.URL.RawQuery == ""
	}
	return false
}

func (f *forwarder) rewrite(pr *httputil.ProxyRequest) {
	out := pr.Out
	out.URL = &url.URL{Scheme: "http", Host: "localhost", Path: pr.In.URL.Path, RawQuery: pr.In.URL.RawQuery}
	out.Host = "localhost"
	h := http.Header{}
	for _, k := range requestHeaders {
		if v := pr.In.Header.Values(k); len(v) > 0 {
			h[k] = v
		}
	}
	out.Header = h
}

// modifyResponse passes the proxy's answer on with its allowed headers. A
// redirect is a failure (the proxy never sends one; git must not follow
// one elsewhere); a 401 or 407 becomes 403, so git asks no credential
// helper and prompts for no password; a refusal's first line is printed.
func (f *forwarder) modifyResponse(resp *http.Response) error {
	h := http.Header{}
	for _, k := range responseHeaders {
		if v := resp.Header.Values(k); len(v) > 0 {
			h[k] = v
		}
	}
	resp.Header = h
	switch {
	case resp.StatusCode >= 300 && resp.StatusCode < 400:
		resp.Body.Close()
		return fmt.Errorf("the proxy answered %s, a redirect: not followed", resp.Status)
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusProxyAuthRequired:
		resp.StatusCode, resp.Status = http.StatusForbidden, "403 Forbidden"
	}
	if resp.StatusCode >= 400 {
		f.printRefusal(resp)
	}
	return nil
}

// printRefusal prints the first line of a refusal's body, which starts
// with the refusal code, then hands git the body whole.
func (f *forwarder) printRefusal(resp *http.Response) {
	head := make([]byte, maxRefusal)
	n, _ := io.ReadFull(resp.Body, head)
	head = head[:n]
	resp.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(strings.NewReader(string(head)), resp.Body), resp.Body}
	line, _, _ := strings.Cut(string(head), "\n")
	if line = strings.TrimSpace(line); line == "" {
		line = resp.Status
	}
	f.once.Do(func() { fmt.Fprintf(f.stderr, "coily: refused: %s\n", visible.Text(line)) })
}

func (f *forwarder) fail(w http.ResponseWriter, r *http.Request, err error) {
	if r.Context().Err() == nil {
		f.once.Do(func() { fmt.Fprintf(f.stderr, "coily: git proxy: %s\n", visible.Text(err.Error())) })
	}
	http.Error(w, "coily: git proxy unreachable", http.StatusBadGateway)
}
