package gitproxy

import (
	"compress/gzip"
	"fmt"
	"io"
	"net/http"
	"net/http/cgi"
	"net/url"
	"path/filepath"

	"coily.dev/coily/refusal"
)

// backendRequest is what git http-backend is given of an agent's
// request: its method, the path of the repository the proxy chose under
// root, and only the headers git needs (the content type and Git-Protocol,
// which selects protocol v2). The body is bounded at limit bytes, after
// inflating a gzip-encoded one.
func backendRequest(r *http.Request, name, suffix string, limit int64) (*http.Request, error) {
	out := &http.Request{Method: r.Method, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, Host: "coily",
		URL: &url.URL{Path: "/" + name + "/" + suffix, RawQuery: r.URL.RawQuery}, Header: http.Header{},
		RemoteAddr: r.RemoteAddr, ContentLength: -1}
	out = out.WithContext(r.Context())
	for _, h := range []string{"Content-Type", "Git-Protocol", "Accept"} {
		if v := r.Header.Get(h); v != "" {
			out.Header.Set(h, v)
		}
	}
	if r.Method != http.MethodPost {
		out.Body = http.NoBody
		return out, nil
	}
	if r.ContentLength > limit {
		return nil, refusal.New(refusal.BadRequest, "request body of %d bytes is larger than the proxy's bound of %d", r.ContentLength, limit)
	}
	// Not http.MaxBytesReader: git's stdin is copied on a goroutine of
	// its own, and that reader touches the response the handler writes.
	body := struct {
		io.Reader
		io.Closer
	}{&boundedReader{r: r.Body, left: limit}, r.Body}
	switch r.Header.Get("Content-Encoding") {
	case "", "identity":
		out.Body, out.ContentLength = body, r.ContentLength
	case "gzip", "x-gzip":
		zr, err := gzip.NewReader(body)
		if err != nil {
			return nil, refusal.Wrap(refusal.BadRequest, err, "request body is not gzip")
		}
		out.Body = struct {
			io.Reader
			io.Closer
		}{&boundedReader{r: zr, left: limit}, body}
	default:
		return nil, refusal.New(refusal.BadRequest, "content encoding %q is not served", r.Header.Get("Content-Encoding"))
	}
	return out, nil
}

// boundedReader fails once more than left bytes were read.
type boundedReader struct {
	r    io.Reader
	left int64
}

func (b *boundedReader) Read(p []byte) (int, error) {
	if b.left <= 0 {
		return 0, fmt.Errorf("request body larger than the proxy's bound")
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.r.Read(p)
	b.left -= int64(n)
	return n, err
}

// serveBackend runs git http-backend on req for the repository under
// root, with env added to git's own, and counts the bytes answered.
func (p *Proxy) serveBackend(w http.ResponseWriter, req *http.Request, root string, env []string) int64 {
	cw := &countingWriter{ResponseWriter: w}
	h := &cgi.Handler{Path: p.backend, Dir: root,
		Env:    append(append(p.gitEnv(), "GIT_PROJECT_ROOT="+filepath.Clean(root), "GIT_HTTP_EXPORT_ALL=1"), env...),
		Stderr: logWriter{p.log}}
	h.ServeHTTP(cw, req)
	return cw.n
}

type countingWriter struct {
	http.ResponseWriter
	n int64
}

func (c *countingWriter) Write(b []byte) (int, error) {
	n, err := c.ResponseWriter.Write(b)
	c.n += int64(n)
	return n, err
}

func (c *countingWriter) Flush() {
	if f, ok := c.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// flushing sends each write on at once: a push's answer carries what
// git shows while the push is decided (keepalives, a push waiting for an
// approval saying so), which would otherwise wait in the server's buffer
// until the answer ends.
type flushing struct{ http.ResponseWriter }

func (f flushing) Write(b []byte) (int, error) {
	n, err := f.ResponseWriter.Write(b)
	if err == nil {
		err = http.NewResponseController(f.ResponseWriter).Flush()
	}
	return n, err
}

func (f flushing) Unwrap() http.ResponseWriter { return f.ResponseWriter }
