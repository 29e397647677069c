package descriptor

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
	"time"
)

// gitDoc is a valid git exchange as JSON, its "git" member replaced by
// git when that is not empty.
func gitDoc(git string) string {
	if git == "" {
		git = `{"method":"POST","path":"/git/github.com/alice/app.git/git-receive-pack","headers":{"Content-Type":"application/x-git-receive-pack-request"},"body_base64":"MDAwMA=="}`
	}
	return `{"version":2,"id":"0f8fad5b-d9cb-469f-a165-70867728950e","created_at":"2026-01-02T03:04:05Z",` +
		`"nonce":"9b2f0c6e1d4a4f3b8c7e6a5d4c3b2a19","sandbox":"agent-1","git":` + git +
		`,"hmac":"` + strings.Repeat("ab", 32) + `"}`
}

func TestGitExchangeParses(t *testing.T) {
	r, _, err := ParseRequest([]byte(gitDoc("")))
	if err != nil {
		t.Fatal(err)
	}
	want := &GitExchange{Method: "POST", Path: "/git/github.com/alice/app.git/git-receive-pack",
		Header: map[string]string{"Content-Type": "application/x-git-receive-pack-request"}, Body: []byte("0000")}
	if !reflect.DeepEqual(r.Git, want) || r.Argv != nil {
		t.Fatalf("got %+v", r.Git)
	}
	get := `{"method":"GET","path":"/git/h/r/info/refs","query":"service=git-upload-pack","headers":{"Git-Protocol":"version=2","Accept":"*/*"}}`
	if r, _, err = ParseRequest([]byte(gitDoc(get))); err != nil || r.Git.Query != "service=git-upload-pack" || r.Git.Body != nil {
		t.Fatalf("GET: %v %+v", err, r)
	}
}

// hostileGit are git exchanges the reader refuses, and what its message
// names.
var hostileGit = []struct{ name, doc, want string }{
	{"method PUT", gitDoc(`{"method":"PUT","path":"/git/h/r/info/refs"}`), "GET or POST"},
	{"method lower case", gitDoc(`{"method":"get","path":"/git/h/r/info/refs"}`), "GET or POST"},
	{"no method", gitDoc(`{"path":"/git/h/r/info/refs"}`), "git.method"},
	{"no path", gitDoc(`{"method":"GET"}`), "git.path"},
	{"path outside /git/", gitDoc(`{"method":"GET","path":"/api/v1/exec"}`), "/git/"},
	{"path with a query", gitDoc(`{"method":"GET","path":"/git/h/r/info/refs?service=git-upload-pack"}`), "printable ASCII"},
	{"path with a space", gitDoc(`{"method":"GET","path":"/git/h/r /info/refs"}`), "printable ASCII"},
	{"path with CR LF", gitDoc(`{"method":"GET","path":"/git/h/r\r\nHost: x/info/refs"}`), "printable ASCII"},
	{"path with a fragment", gitDoc(`{"method":"GET","path":"/git/h/r#x"}`), "printable ASCII"},
	{"path with UTF-8", gitDoc(`{"method":"GET","path":"/git/h/é/info/refs"}`), "printable ASCII"},
	{"path too long", gitDoc(`{"method":"GET","path":"/git/` + strings.Repeat("a", MaxGitPathBytes) + `"}`), "longer than"},
	{"query with a fragment", gitDoc(`{"method":"GET","path":"/git/h/r/info/refs","query":"service=git-upload-pack#"}`), "printable ASCII"},
	{"query too long", gitDoc(`{"method":"GET","path":"/git/h/r/info/refs","query":"` + strings.Repeat("a", MaxGitQueryBytes+1) + `"}`), "longer than"},
	{"Authorization header", gitDoc(`{"method":"GET","path":"/git/h/r/info/refs","headers":{"Authorization":"Bearer x"}}`), "not carried"},
	{"Host header", gitDoc(`{"method":"GET","path":"/git/h/r/info/refs","headers":{"Host":"evil"}}`), "not carried"},
	{"header in lower case", gitDoc(`{"method":"GET","path":"/git/h/r/info/refs","headers":{"git-protocol":"version=2"}}`), "not carried"},
	{"header value with LF", gitDoc(`{"method":"GET","path":"/git/h/r/info/refs","headers":{"Git-Protocol":"version=2\nX: y"}}`), "printable ASCII"},
	{"header value not a string", gitDoc(`{"method":"GET","path":"/git/h/r/info/refs","headers":{"Git-Protocol":2}}`), "string"},
	{"header value too long", gitDoc(`{"method":"GET","path":"/git/h/r/info/refs","headers":{"Accept":"` + strings.Repeat("a", MaxGitHeaderValues+1) + `"}}`), "longer than"},
	{"headers a list", gitDoc(`{"method":"GET","path":"/git/h/r/info/refs","headers":["Accept"]}`), "mapping"},
	{"GET with a body", gitDoc(`{"method":"GET","path":"/git/h/r/info/refs","body_base64":""}`), "not allowed with GET"},
	{"body not base64", gitDoc(`{"method":"POST","path":"/git/h/r/git-upload-pack","body_base64":"MDAwMA"}`), "base64"},
	{"body with a line break", gitDoc(`{"method":"POST","path":"/git/h/r/git-upload-pack","body_base64":"MDAw\nMA=="}`), "base64"},
	{"body too large", gitDoc(`{"method":"POST","path":"/git/h/r/git-upload-pack","body_base64":"` + strings.Repeat("A", (MaxGitBody/3+1)*4) + `"}`), "more than"},
	{"unknown member", gitDoc(`{"method":"GET","path":"/git/h/r/info/refs","url":"https://evil/"}`), "unknown field"},
	{"git not a mapping", gitDoc(`"GET /git/h/r/info/refs"`), "mapping"},
	{"git with argv", strings.Replace(gitDoc(""), `"git":`, `"argv":["/bin/true"],"git":`, 1), "not allowed in a git exchange"},
	{"git with env", strings.Replace(gitDoc(""), `"git":`, `"env":{"A":"b"},"git":`, 1), "not allowed in a git exchange"},
	{"git with stdin", strings.Replace(gitDoc(""), `"git":`, `"stdin":"x","git":`, 1), "not allowed in a git exchange"},
	{"git with a note", strings.Replace(gitDoc(""), `"git":`, `"note":"x","git":`, 1), "not allowed in a git exchange"},
	{"git at version 1", strings.Replace(gitDoc(""), `"version":2`, `"version":1`, 1), "only allowed at version 2"},
	{"a command at version 2", strings.Replace(strings.Replace(baseJSON, `"version": 1`, `"version": 2`, 1), `"note": "check the tree",`, ``, 1), "git is missing"},
	{"version 3", strings.Replace(gitDoc(""), `"version":2`, `"version":3`, 1), "unsupported version"},
	{"git twice", strings.Replace(gitDoc(""), `"git":`, `"git":{},"git":`, 1), "duplicate"},
}

func TestGitExchangeHostile(t *testing.T) {
	for _, c := range hostileGit {
		t.Run(c.name, func(t *testing.T) {
			_, _, err := ParseRequest([]byte(c.doc))
			if err == nil {
				t.Fatal("accepted")
			}
			if e := asError(t, err); e.Code != CodeBadRequest || !strings.Contains(e.Error(), c.want) {
				t.Fatalf("got %v (%s), want bad-request naming %q", err, e.Code, c.want)
			}
		})
	}
}

func TestGitExchangeSigned(t *testing.T) {
	key := testKey()
	r := &Request{ID: "0f8fad5b-d9cb-469f-a165-70867728950e", CreatedAt: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
		Nonce: "9b2f0c6e1d4a4f3b8c7e6a5d4c3b2a19", Sandbox: "agent-1",
		Git: &GitExchange{Method: "POST", Path: "/git/h/r/git-upload-pack", Header: map[string]string{"Content-Type": "x"}, Body: []byte{0, 1, 2}}}
	out, err := MarshalRequest(r, key)
	if err != nil {
		t.Fatal(err)
	}
	got, canon, err := ParseRequest(out)
	if err != nil {
		t.Fatal(err)
	}
	if err := Verify(canon, got.HMAC, key); err != nil || !reflect.DeepEqual(got.Git, r.Git) {
		t.Fatalf("%v %+v", err, got.Git)
	}
	// A changed body breaks the signature.
	tampered := bytes.Replace(out, []byte(`"AAEC"`), []byte(`"AAED"`), 1)
	got, canon, err = ParseRequest(tampered)
	if err != nil || Verify(canon, got.HMAC, key) == nil {
		t.Fatalf("tampered body verifies: %v", err)
	}
	r.Git.Body = make([]byte, MaxGitBody+1)
	if _, err := MarshalRequest(r, key); err == nil {
		t.Fatal("a body over the bound was written")
	}
	r.Git.Body, r.Argv = nil, []string{"/bin/true"}
	r.Git.Method = "GET"
	if _, err = MarshalRequest(r, key); err == nil {
		t.Fatal("a git exchange with argv was written")
	}
}

func TestGitAnswer(t *testing.T) {
	a := &GitAnswer{Status: 200, Header: map[string]string{"Content-Type": "application/x-git-upload-pack-result"}, Body: []byte("0008NAK\n")}
	out, err := MarshalResponse(&Response{ID: "0f8fad5b-d9cb-469f-a165-70867728950e", Outcome: OutcomeHTTP, Git: a, AuditID: "A000000000001"})
	if err != nil {
		t.Fatal(err)
	}
	r, err := ParseResponse(out)
	if err != nil || !reflect.DeepEqual(r.Git, a) {
		t.Fatalf("%v %+v", err, r)
	}
	head := `{"version":2,"id":"0f8fad5b-d9cb-469f-a165-70867728950e","duration_ms":0,`
	for name, doc := range map[string]string{
		"no status":           head + `"outcome":"http","body_base64":""}`,
		"status 99":           head + `"outcome":"http","status":99}`,
		"status 600":          head + `"outcome":"http","status":600}`,
		"Location header":     head + `"outcome":"http","status":302,"headers":{"Location":"https://evil/"}}`,
		"Set-Cookie header":   head + `"outcome":"http","status":200,"headers":{"Set-Cookie":"a=b"}}`,
		"exit members":        head + `"outcome":"http","status":200,"exit_code":0}`,
		"status in an exit":   head + `"outcome":"exit","exit_code":0,"status":200}`,
		"body in a refusal":   head + `"outcome":"refused","code":"internal","message":"x","body_base64":""}`,
		"code in an answer":   head + `"outcome":"http","status":200,"code":"internal"}`,
		"body over an answer": head + `"outcome":"http","status":200,"body_base64":"` + strings.Repeat("A", (MaxGitAnswerBody/3+1)*4) + `"}`,
	} {
		if _, err := ParseResponse([]byte(doc)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// A teardown is version 1, whatever it tears down.
func TestGitTeardownVersion(t *testing.T) {
	td := `{"version":2,"id":"0f8fad5b-d9cb-469f-a165-70867728950e","created_at":"2026-01-02T03:04:05Z","nonce":"9b2f0c6e1d4a4f3b8c7e6a5d4c3b2a19","sandbox":"agent-1","hmac":"` + strings.Repeat("ab", 32) + `"}`
	if _, _, err := ParseTeardown([]byte(td)); err == nil || !strings.Contains(err.Error(), "a teardown is version 1") {
		t.Fatalf("a teardown at version 2: %v", err)
	}
}

// FuzzParseGitExchange reads git exchanges and answers, seeded from the
// hostile table: what is accepted writes back to itself.
func FuzzParseGitExchange(f *testing.F) {
	f.Add([]byte(gitDoc("")))
	for _, c := range hostileGit {
		f.Add([]byte(c.doc))
	}
	f.Add([]byte(`{"version":2,"id":"0f8fad5b-d9cb-469f-a165-70867728950e","duration_ms":0,"outcome":"http","status":200,"headers":{"Content-Type":"x"},"body_base64":"MDAwMA=="}`))
	key := testKey()
	f.Fuzz(func(t *testing.T, data []byte) {
		if r, _, err := ParseRequest(data); err != nil {
			checkRefusal(t, err)
		} else if r.Git != nil {
			out, err := MarshalRequest(r, key)
			if err != nil {
				t.Fatalf("MarshalRequest of an accepted exchange: %v", err)
			}
			r2, _, err := ParseRequest(out)
			if err != nil || !reflect.DeepEqual(r.Git, r2.Git) || r2.Argv != nil {
				t.Fatalf("round trip: %v %+v %+v", err, r.Git, r2)
			}
		}
		if resp, err := ParseResponse(data); err == nil && resp.Git != nil {
			out, err := MarshalResponse(resp)
			if err != nil {
				t.Fatalf("MarshalResponse of an accepted answer: %v", err)
			}
			if r2, err := ParseResponse(out); err != nil || !reflect.DeepEqual(resp.Git, r2.Git) {
				t.Fatalf("round trip: %v", err)
			}
		}
	})
}
