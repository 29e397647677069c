package gitproxy

import (
	"strings"
	"testing"
)

func TestParsePath(t *testing.T) {
	for _, c := range []struct {
		method, path, query string
		want                Target
	}{
		{"GET", "/git/github.com/alice/app.git/info/refs", "service=git-upload-pack",
			Target{Host: "github.com", Port: 443, Repo: "alice/app.git", Service: UploadPack, Refs: true}},
		{"GET", "/git/localhost:8443/o/r/info/refs", "service=git-receive-pack",
			Target{Host: "localhost", Port: 8443, Repo: "o/r", Service: ReceivePack, Refs: true}},
		{"POST", "/git/github.com/alice/app/git-upload-pack", "",
			Target{Host: "github.com", Port: 443, Repo: "alice/app", Service: UploadPack}},
		{"POST", "/git/github.com/alice/app.git/git-receive-pack", "",
			Target{Host: "github.com", Port: 443, Repo: "alice/app.git", Service: ReceivePack}},
		{"GET", "/git/h.example/a/b/c/info/refs", "service=git-upload-pack",
			Target{Host: "h.example", Port: 443, Repo: "a/b/c", Service: UploadPack, Refs: true}},
	} {
		got, err := ParsePath(c.method, c.path, c.query)
		if err != nil || got != c.want {
			t.Errorf("ParsePath(%s %s?%s) = %+v, %v; want %+v", c.method, c.path, c.query, got, err, c.want)
		}
	}
}

// hostilePaths are requests ParsePath refuses.
var hostilePaths = []struct{ method, path, query string }{
	{"GET", "/git/github.com/alice/../bob/app/info/refs", "service=git-upload-pack"},
	{"GET", "/git/github.com/alice/./app/info/refs", "service=git-upload-pack"},
	{"GET", "/git/github.com/alice/%2e%2e/app/info/refs", "service=git-upload-pack"},
	{"GET", "/git/github.com/alice%2fapp/info/refs", "service=git-upload-pack"},
	{"GET", "/git/github.com/alice%2Fapp/info/refs", "service=git-upload-pack"},
	{"GET", "/git/github.com/alice\\app/info/refs", "service=git-upload-pack"},
	{"GET", "/git/github.com/alice//app/info/refs", "service=git-upload-pack"},
	{"GET", "/git/github.com/.../info/refs", "service=git-upload-pack"},
	{"GET", "/git/github.com/alice/app/info/refs", "service=git-upload-archive"},
	{"GET", "/git/github.com/alice/app/info/refs", "service=git-upload-pack&x=1"},
	{"GET", "/git/github.com/alice/app/info/refs", ""},
	{"POST", "/git/github.com/alice/app/git-upload-archive", ""},
	{"POST", "/git/github.com/alice/app/git-upload-pack", "x=1"},
	{"GET", "/git/github.com/alice/app/git-upload-pack", ""},
	{"PUT", "/git/github.com/alice/app/git-receive-pack", ""},
	{"GET", "/git/github.com/alice/app/HEAD", ""},
	{"GET", "/git/github.com/alice/app/objects/info/packs", ""},
	{"GET", "/git/GitHub.com/alice/app/info/refs", "service=git-upload-pack"},
	{"GET", "/git/127.0.0.1/alice/app/info/refs", "service=git-upload-pack"},
	{"GET", "/git/[::1]/alice/app/info/refs", "service=git-upload-pack"},
	{"GET", "/git/user@github.com/alice/app/info/refs", "service=git-upload-pack"},
	{"GET", "/git/github.com:0/alice/app/info/refs", "service=git-upload-pack"},
	{"GET", "/git/github.com:0443/alice/app/info/refs", "service=git-upload-pack"},
	{"GET", "/git/github.com:99999/alice/app/info/refs", "service=git-upload-pack"},
	{"GET", "/git/github.com/info/refs", "service=git-upload-pack"},
	{"GET", "/git//alice/app/info/refs", "service=git-upload-pack"},
	{"GET", "/gitx/github.com/alice/app/info/refs", "service=git-upload-pack"},
	{"GET", "/git/github.com/" + strings.Repeat("a/", 20) + "info/refs", "service=git-upload-pack"},
	{"GET", "/git/github.com/" + strings.Repeat("a", 101) + "/info/refs", "service=git-upload-pack"},
	{"GET", "/git/github.com/al ice/app/info/refs", "service=git-upload-pack"},
	{"GET", "/git/github.com/alice/app\n/info/refs", "service=git-upload-pack"},
}

func TestParsePathHostile(t *testing.T) {
	for _, c := range hostilePaths {
		if got, err := ParsePath(c.method, c.path, c.query); err == nil {
			t.Errorf("ParsePath(%s %q?%s) = %+v, want an error", c.method, c.path, c.query, got)
		}
	}
}

func FuzzParsePath(f *testing.F) {
	f.Add("GET", "/git/github.com/alice/app.git/info/refs", "service=git-upload-pack")
	f.Add("POST", "/git/localhost:8443/o/r/git-receive-pack", "")
	for _, c := range hostilePaths {
		f.Add(c.method, c.path, c.query)
	}
	f.Fuzz(func(t *testing.T, method, p, q string) {
		got, err := ParsePath(method, p, q)
		if err != nil {
			return
		}
		for _, seg := range strings.Split(got.Repo, "/") {
			if seg == "" || seg == "." || seg == ".." || strings.ContainsAny(seg, "%\\:@?#") {
				t.Fatalf("accepted repository %q from %q", got.Repo, p)
			}
		}
		if got.Host == "" || strings.ContainsAny(got.Host, "/:@%") || got.Port < 1 || got.Port > 65535 {
			t.Fatalf("accepted host %q:%d from %q", got.Host, got.Port, p)
		}
		if got.Service != UploadPack && got.Service != ReceivePack {
			t.Fatalf("accepted service %q", got.Service)
		}
	})
}
