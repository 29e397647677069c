package gitremote

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"

	"coily.dev/coily/client/folder"
	"coily.dev/coily/descriptor"
	"coily.dev/coily/refusal"
)

// exchanger sends one git exchange and returns its answer
// (folder.Client).
type exchanger interface {
	Exchange(ctx context.Context, g *descriptor.GitExchange) (*descriptor.GitAnswer, error)
}

// folderTransport carries git's requests through a network-less
// sandbox's shared folder: each one is a git exchange, written signed
// into the folder, relayed by coily's bridge and answered by the server's
// git proxy (docs/protocol.md §4.5). Only what a descriptor carries
// passes: the method, path, query, the headers of
// descriptor.GitRequestHeaders and a body of at most
// descriptor.MaxGitBody bytes.
type folderTransport struct{ x exchanger }

// newFolderTransport reads the shared folder and the sandbox's key as
// coily exec does: COILY_MOUNT or the working directory up, COILY_KEY_FILE
// or ~/.coily/key.
func newFolderTransport(getenv func(string) string) (*folderTransport, string, error) {
	cwd, err := os.Getwd()
	if err != nil {
		return nil, "", err
	}
	mount, err := folder.FindMount(getenv, cwd)
	if err != nil {
		return nil, "", err
	}
	path, err := folder.KeyPath(getenv)
	if err != nil {
		return nil, "", err
	}
	key, err := folder.ReadKeyFile(path)
	if err != nil {
		return nil, "", err
	}
	return &folderTransport{x: &folder.Client{Mount: mount, Key: key}}, "the shared folder " + mount, nil
}

// RoundTrip implements http.RoundTripper.
func (t *folderTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	g := &descriptor.GitExchange{Method: r.Method, Path: r.URL.EscapedPath(), Query: r.URL.RawQuery}
	for _, k := range descriptor.GitRequestHeaders {
		if v := r.Header.Get(k); v != "" {
			if g.Header == nil {
				g.Header = map[string]string{}
			}
			g.Header[k] = v
		}
	}
	if r.Body != nil && r.Method == http.MethodPost {
		body, err := io.ReadAll(io.LimitReader(r.Body, descriptor.MaxGitBody+1))
		r.Body.Close()
		if err != nil {
			return nil, fmt.Errorf("read git's request: %w", err)
		}
		if len(body) > descriptor.MaxGitBody {
			return refusalAnswer(r, refusal.New(refusal.BadRequest,
				"git's request is larger than %d bytes, more than one exchange through the shared folder carries: push fewer commits at once", descriptor.MaxGitBody)), nil
		}
		g.Body = body
	}
	a, err := t.x.Exchange(r.Context(), g)
	var re *refusal.Error
	switch {
	case errors.As(err, &re):
		return refusalAnswer(r, re), nil
	case err != nil:
		return nil, err
	}
	h := http.Header{}
	for k, v := range a.Header {
		h.Set(k, v)
	}
	return answer(r, a.Status, h, a.Body), nil
}

// refusalAnswer is a refusal as the git proxy answers one: its status,
// and one text/plain line starting with its code.
func refusalAnswer(r *http.Request, re *refusal.Error) *http.Response {
	status := http.StatusForbidden
	switch re.Code {
	case refusal.BadRequest:
		status = http.StatusBadRequest
	case refusal.Internal:
		status = http.StatusBadGateway
	}
	msg := strings.ReplaceAll(re.Msg, "\n", " ")
	return answer(r, status, http.Header{"Content-Type": {"text/plain; charset=utf-8"}}, []byte(string(re.Code)+": "+msg+"\n"))
}

func answer(r *http.Request, status int, h http.Header, body []byte) *http.Response {
	return &http.Response{StatusCode: status, Status: fmt.Sprintf("%d %s", status, http.StatusText(status)),
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, Header: h, ContentLength: int64(len(body)),
		Body: io.NopCloser(bytes.NewReader(body)), Request: r}
}
