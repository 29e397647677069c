package gitproxy

import (
	"context"
	"io"
	"strings"
	"testing"

	"coily.dev/coily/descriptor"
)

// The proxy's answer is kept up to what a response file carries, and no
// further.
func TestAnswerWriterBounded(t *testing.T) {
	w := &answerWriter{header: map[string][]string{}}
	if n, err := w.Write(make([]byte, descriptor.MaxGitAnswerBody)); err != nil || n != descriptor.MaxGitAnswerBody || w.status != 200 {
		t.Fatalf("within the bound: %d %v, status %d", n, err, w.status)
	}
	if _, err := w.Write([]byte{1}); err == nil || !w.over {
		t.Fatal("a byte past the bound was kept")
	}
	if _, err := w.Write(nil); err == nil {
		t.Fatal("a write after the bound was taken")
	}
}

// A git exchange is the HTTP request it says, and nothing more: its
// escaped path as sent, its query, its headers and body.
func TestExchangeRequest(t *testing.T) {
	g := &descriptor.GitExchange{Method: "POST", Path: "/git/github.com/alice/a%2e/git-upload-pack", Query: "x=1",
		Header: map[string]string{"Content-Type": "application/x-git-upload-pack-request"}, Body: []byte("0000")}
	r, err := exchangeRequest(context.Background(), g)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(r.Body)
	if r.URL.EscapedPath() != g.Path || r.URL.RawQuery != "x=1" || r.Host != "coily" || r.URL.Host != "" || string(body) != "0000" ||
		r.ContentLength != 4 || r.Header.Get("Content-Type") != "application/x-git-upload-pack-request" || len(r.Header) != 1 {
		t.Fatalf("request %+v", r)
	}
	g = &descriptor.GitExchange{Method: "GET", Path: "/git/h/r/info/refs"}
	if r, err = exchangeRequest(context.Background(), g); err != nil || r.Body != nil && r.ContentLength != 0 {
		t.Fatalf("GET: %v %+v", err, r)
	}
	if _, err := exchangeRequest(context.Background(), &descriptor.GitExchange{Method: "GET", Path: "/git/h/%zz/info/refs"}); err == nil ||
		!strings.Contains(err.Error(), "not a request path") {
		t.Errorf("a broken escape: %v", err)
	}
}
