package gitproxy

import (
	"compress/gzip"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os/exec"
	"strings"
	"time"

	"coily.dev/coily/refusal"
)

// backendRequest is what git's service is given of an agent's request:
// its method, and only the headers git needs (the content type, checked
// to be the service's, and Git-Protocol, which selects protocol v2). The
// body is bounded at limit bytes, after inflating a gzip-encoded one.
func backendRequest(r *http.Request, svc Service, limit int64) (*http.Request, error) {
	out := &http.Request{Method: r.Method, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, Host: "coily",
		URL: &url.URL{Path: "/"}, Header: http.Header{}, RemoteAddr: r.RemoteAddr, ContentLength: -1}
	out = out.WithContext(r.Context())
	for _, h := range []string{"Content-Type", "Git-Protocol"} {
		if v := r.Header.Get(h); v != "" {
			out.Header.Set(h, v)
		}
	}
	if v := out.Header.Get("Git-Protocol"); len(v) > maxGitProtocol || strings.ContainsFunc(v, func(c rune) bool { return c < ' ' || c > '~' }) {
		return nil, refusal.New(refusal.BadRequest, "Git-Protocol header of %d bytes is not printable ASCII of at most %d", len(v), maxGitProtocol)
	}
	if r.Method != http.MethodPost {
		out.Body = http.NoBody
		return out, nil
	}
	if ct := r.Header.Get("Content-Type"); ct != "application/x-"+string(svc)+"-request" {
		return nil, refusal.New(refusal.BadRequest, "content type %q is not %s's request", oneLine(ct), svc)
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

// maxGitProtocol bounds the Git-Protocol header ("version=2" is all git
// sends).
const maxGitProtocol = 256

// serveGit answers a smart HTTP request as git http-backend does, by
// running git's service on the repository dir itself, with env added to
// git's own: info/refs is the service's advertisement, after a "#
// service=" pkt-line and a flush unless the client asked for protocol v2
// (gitprotocol-http(5)); a POST is the service on the request's body
// (--stateless-rpc). Git-Protocol reaches git as GIT_PROTOCOL. It returns
// the bytes answered.
func (p *Proxy) serveGit(w http.ResponseWriter, req *http.Request, dir string, svc Service, refs bool, env []string) int64 {
	name := strings.TrimPrefix(string(svc), "git-")
	args, kind := []string{name, "--stateless-rpc", dir}, "result"
	if refs {
		args, kind = []string{name, "--http-backend-info-refs", dir}, "advertisement"
	}
	// Not tied to the request's context, as the CGI was not: git ends
	// when the agent stops reading (its writes fail) or sending (its
	// input ends); a push's hook is answered when the request ends.
	cmd := exec.Command(p.git, args...)
	cmd.Env, cmd.Dir, cmd.WaitDelay = append(p.gitEnv(), env...), dir, 10*time.Second
	proto := req.Header.Get("Git-Protocol")
	if proto != "" {
		cmd.Env = append(cmd.Env, "GIT_PROTOCOL="+proto)
	}
	var body *bodyFeed
	if req.Method == http.MethodPost {
		var err error
		if body, err = feedBody(cmd, req.Body); err != nil {
			p.log.Warn("git proxy: git "+name+" stdin", "err", err)
			http.Error(w, "git proxy: cannot start git", http.StatusInternalServerError)
			return 0
		}
		// Git writes (progress, keepalives) while it still reads the
		// body: without full duplex, Go's HTTP/1 server throws away the
		// unread rest of the body at the first flush, and git reads an
		// early EOF. HTTP/2 is full duplex already (ErrNotSupported).
		_ = http.NewResponseController(w).EnableFullDuplex()
	}
	h := w.Header()
	h.Set("Content-Type", "application/x-"+string(svc)+"-"+kind)
	h.Set("Cache-Control", "no-cache, max-age=0, must-revalidate")
	h.Set("Pragma", "no-cache")
	h.Set("Expires", "Fri, 01 Jan 1980 00:00:00 GMT")
	w.WriteHeader(http.StatusOK)
	cw := &countingWriter{ResponseWriter: w}
	if refs && !strings.Contains(":"+proto+":", ":version=2:") {
		line := "# service=" + string(svc) + "\n"
		fmt.Fprintf(cw, "%04x%s0000", len(line)+4, line)
	}
	cmd.Stdout, cmd.Stderr = cw, logWriter{p.log}
	if err := cmd.Run(); err != nil {
		p.log.Warn("git proxy: git "+name+" failed", "err", err)
	}
	if body != nil {
		body.abandon(w)
	}
	// The body's unread rest (git refused before its end) is drained
	// here, in the handler: drained after it, in full duplex, the
	// server's read of it races its read of the next request and
	// panics ("invalid concurrent Body.Read call", Go issue 68560).
	req.Body.Close()
	return cw.n
}

// bodyFeed copies a request's body into git's stdin. exec's own copy
// (cmd.Stdin = body) makes Wait wait for it: when git ends before the
// body does (a push refused at its first command), Wait stayed blocked on
// the agent's next read until the read timeout (15 min), holding the push
// slot, for as long as the agent trickled or withheld the rest.
type bodyFeed struct {
	done  chan struct{}
	whole bool // the body was read to its end; set before done closes
}

// feedBody starts copying body into cmd's stdin (cmd not yet started);
// the pipe closes when the body ends, or when Wait sees git exit.
func feedBody(cmd *exec.Cmd, body io.Reader) (*bodyFeed, error) {
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("git stdin: %w", err)
	}
	f := &bodyFeed{done: make(chan struct{})}
	go func() {
		defer close(f.done)
		_, err := io.Copy(in, body)
		f.whole = err == nil
		in.Close()
	}()
	return f, nil
}

// drainGrace is how long the body's rest may take to arrive once git has
// exited: what an honest client has already sent is drained (and the
// connection kept); an agent withholding it loses the connection instead.
const drainGrace = time.Second

// abandon ends the copy once git has exited. Unless the body was read to
// its end, the connection's read deadline is set to now, so that the
// copy's read still waiting on the agent returns; then to drainGrace from
// now for the drain of the rest (Body.Close): cut at once, the drain
// fails without closing the connection, and the server read the body's
// rest as the next request. abandon returns once the copy has stopped
// reading the body.
func (f *bodyFeed) abandon(w http.ResponseWriter) {
	select {
	case <-f.done:
		if f.whole {
			return
		}
	default:
	}
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Now())
	<-f.done
	_ = rc.SetReadDeadline(time.Now().Add(drainGrace))
}

type countingWriter struct {
	http.ResponseWriter
	n int64
}

// Write writes b and flushes it: git's keepalives and progress reach
// the client as git writes them.
func (c *countingWriter) Write(b []byte) (int, error) {
	n, err := c.ResponseWriter.Write(b)
	c.n += int64(n)
	c.Flush()
	return n, err
}

func (c *countingWriter) Flush() {
	if f, ok := c.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}
