package gitremote

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"coily.dev/coily/descriptor"
	"coily.dev/coily/refusal"
)

// fakeExchanger answers exchanges as told and keeps what it was sent.
type fakeExchanger struct {
	sent   []*descriptor.GitExchange
	answer *descriptor.GitAnswer
	err    error
}

func (f *fakeExchanger) Exchange(_ context.Context, g *descriptor.GitExchange) (*descriptor.GitAnswer, error) {
	f.sent = append(f.sent, g)
	return f.answer, f.err
}

func folderRoundTrip(t *testing.T, x *fakeExchanger, method, target, body string, h http.Header) (*http.Response, string) {
	t.Helper()
	r, err := http.NewRequest(method, "http://127.0.0.1:1"+target, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range h {
		r.Header[k] = v
	}
	resp, err := (&folderTransport{x: x}).RoundTrip(r)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// Only what an exchange carries goes: the method, escaped path, query
// and git's own headers; no Authorization (the helper's secret) or
// User-Agent.
func TestFolderTransportSends(t *testing.T) {
	x := &fakeExchanger{answer: &descriptor.GitAnswer{Status: 200, Header: map[string]string{"Content-Type": "application/x-git-upload-pack-advertisement"}, Body: []byte("0000")}}
	resp, body := folderRoundTrip(t, x, "GET", "/git/github.com/alice/app%2e/info/refs?service=git-upload-pack", "",
		http.Header{"Authorization": {"Bearer s3cret"}, "Git-Protocol": {"version=2"}, "User-Agent": {"git/2"}})
	if resp.StatusCode != 200 || body != "0000" || resp.Header.Get("Content-Type") != "application/x-git-upload-pack-advertisement" {
		t.Fatalf("answer %d %q %v", resp.StatusCode, body, resp.Header)
	}
	g := x.sent[0]
	if g.Method != "GET" || g.Path != "/git/github.com/alice/app%2e/info/refs" || g.Query != "service=git-upload-pack" || g.Body != nil ||
		len(g.Header) != 1 || g.Header["Git-Protocol"] != "version=2" {
		t.Fatalf("sent %+v", g)
	}
	folderRoundTrip(t, x, "POST", "/git/github.com/alice/app/git-receive-pack", "0000", http.Header{"Content-Type": {"application/x-git-receive-pack-request"}})
	if g := x.sent[1]; string(g.Body) != "0000" || g.Header["Content-Type"] != "application/x-git-receive-pack-request" {
		t.Fatalf("sent %+v", g)
	}
}

// A body over the bound is refused before anything is written; a
// refusal comes back as the proxy's would, its first line the code.
func TestFolderTransportRefusals(t *testing.T) {
	x := &fakeExchanger{}
	resp, body := folderRoundTrip(t, x, "POST", "/git/h/r/git-receive-pack", strings.Repeat("a", descriptor.MaxGitBody+1), nil)
	if resp.StatusCode != 400 || !strings.HasPrefix(body, "bad-request: ") || len(x.sent) != 0 {
		t.Fatalf("large body: %d %q, %d sent", resp.StatusCode, body, len(x.sent))
	}
	x.err = refusal.New(refusal.ReplayDetected, "nonce already used\nsecond line")
	resp, body = folderRoundTrip(t, x, "GET", "/git/h/r/info/refs?service=git-receive-pack", "", nil)
	if resp.StatusCode != 403 || body != "replay-detected: nonce already used second line\n" {
		t.Fatalf("refusal: %d %q", resp.StatusCode, body)
	}
}
