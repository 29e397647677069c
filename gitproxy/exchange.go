package gitproxy

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/url"

	"coily.dev/coily/access"
	"coily.dev/coily/descriptor"
	"coily.dev/coily/refusal"
)

// A git exchange relayed from a sandbox's folder (docs/protocol.md §4.5)
// is one smart HTTP request of git's: it runs through the proxy in
// process, its caller the sandbox's principal as the relay verified it,
// and its answer goes back in the response file.

// Exchange runs the git exchange g through the proxy as caller c (a
// relayed request's, access.WithRelayed), and returns the proxy's
// answer, bounded by descriptor.MaxGitAnswerBody.
func (p *Proxy) Exchange(ctx context.Context, c access.Caller, g *descriptor.GitExchange) (*descriptor.GitAnswer, error) {
	req, err := exchangeRequest(ctx, g)
	if err != nil {
		return nil, err
	}
	req = req.WithContext(access.WithRelayed(req.Context(), c))
	w := &answerWriter{header: http.Header{}}
	p.ServeHTTP(w, req)
	if w.over {
		return nil, refusal.New(refusal.BadRequest, "the git proxy's answer is larger than %d bytes, more than the folder carries: fetch less at once (a shallow clone, one branch)", descriptor.MaxGitAnswerBody)
	}
	a := &descriptor.GitAnswer{Status: w.status, Body: w.body.Bytes(), Header: map[string]string{}}
	if a.Status == 0 {
		a.Status = http.StatusOK
	}
	for _, k := range descriptor.GitAnswerHeaders {
		if v := w.header.Get(k); v != "" {
			a.Header[k] = v
		}
	}
	return a, nil
}

// exchangeRequest is the HTTP request a git exchange stands for.
func exchangeRequest(ctx context.Context, g *descriptor.GitExchange) (*http.Request, error) {
	u, err := url.Parse(g.Path)
	if err != nil || u.Path == "" || u.RawQuery != "" || u.Host != "" || u.Scheme != "" {
		return nil, refusal.New(refusal.BadRequest, "git exchange path is not a request path")
	}
	u.RawQuery = g.Query
	req, err := http.NewRequestWithContext(ctx, g.Method, "http://coily/", bytes.NewReader(g.Body))
	if err != nil {
		return nil, refusal.Wrap(refusal.BadRequest, err, "git exchange")
	}
	req.URL, req.RequestURI, req.Host = u, u.RequestURI(), "coily"
	req.RemoteAddr = "relay"
	req.ContentLength = int64(len(g.Body))
	if g.Method == http.MethodGet {
		req.Body, req.ContentLength = http.NoBody, 0
	}
	for k, v := range g.Header {
		req.Header.Set(k, v)
	}
	return req, nil
}

var errAnswerTooLarge = errors.New("answer too large")

// answerWriter is the proxy's http.ResponseWriter for a relayed
// exchange: it keeps the answer, up to what a response file carries.
type answerWriter struct {
	header http.Header
	status int
	body   bytes.Buffer
	over   bool
}

func (w *answerWriter) Header() http.Header { return w.header }

func (w *answerWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
}

func (w *answerWriter) Write(b []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	if w.over || w.body.Len()+len(b) > descriptor.MaxGitAnswerBody {
		w.over = true
		return 0, errAnswerTooLarge
	}
	return w.body.Write(b)
}

// Flush implements http.Flusher: the answer is sent whole, at the end.
func (w *answerWriter) Flush() {}
