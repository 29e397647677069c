package egress

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"

	"coily.dev/coily/internal/standin"
)

// TestReplacementsEncodedForms: a secret holding "/", "+" and "=" (as AWS
// tokens and base64 do) echoed as is, JSON-escaped or percent-encoded
// (either hex case) comes back as the placeholder in the same form.
func TestReplacementsEncodedForms(t *testing.T) {
	const secret, ph = "AbC/dE+f==", "coily-placeholder-00"
	rs := replacements([]Injection{{Placeholder: ph, Secret: secret, Form: FormBearer}}, nil, nil)
	for _, f := range echoForms {
		in := "x " + f(secret) + " y " + f(b64(secret)) + " z"
		got := replaceAll(in, rs)
		if strings.Contains(got, f(secret)) || strings.Contains(got, f(b64(secret))) || !strings.Contains(got, f(ph)) {
			t.Errorf("%q -> %q: the secret's form is left", in, got)
		}
	}
	if n := len(rs); n > 2*len(echoForms) {
		t.Errorf("%d replacements, want at most %d", n, 2*len(echoForms))
	}
	for i := 1; i < len(rs); i++ {
		if len(rs[i].old) > len(rs[i-1].old) {
			t.Errorf("replacement %d (%q) is longer than the one before it", i, rs[i].old)
		}
	}
}

// TestReplacementsJSONForms: a secret holding the characters JSON
// encoders escape, echoed in a JSON string as each encoder writes it,
// goes back as the placeholder. Go's is its encoding/json itself; the
// others as their documentation says they write "+<>&='\"\\/".
func TestReplacementsJSONForms(t *testing.T) {
	const secret, ph = `k+<>&='"\/z`, "coily-placeholder-01"
	rs := replacements([]Injection{{Placeholder: ph, Secret: secret, Form: FormBearer}}, nil, nil)
	goJSON, err := json.Marshal(secret)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ encoder, echo string }{
		{"Go encoding/json", string(goJSON[1 : len(goJSON)-1])},
		{"Rails to_json", `k+\u003c\u003e\u0026='\"\\/z`},
		{"JSON.stringify, Python, Jackson", `k+<>&='\"\\/z`},
		{"Gson", `k+\u003c\u003e\u0026\u003d\u0027\"\\/z`},
		{".NET System.Text.Json", `k\u002B\u003C\u003E\u0026=\u0027\u0022\\/z`},
		{"PHP json_encode", `k+<>&='\"\\\/z`},
	} {
		in := `{"token":"` + c.echo + `"}`
		if got := replaceAll(in, rs); got != `{"token":"`+ph+`"}` {
			t.Errorf("%s: %s -> %s; want the placeholder", c.encoder, in, got)
		}
	}
}

// TestEncoded: any coding other than identity, in any value or list
// position, is an encoding the proxy cannot read through.
func TestEncoded(t *testing.T) {
	for _, c := range []struct {
		vals []string
		want bool
	}{
		{nil, false}, {[]string{"identity"}, false}, {[]string{"IDENTITY", ""}, false}, {[]string{" , identity ,"}, false},
		{[]string{"gzip"}, true}, {[]string{"identity", "gzip"}, true}, {[]string{"identity, br"}, true},
		{[]string{"identity,x-custom"}, true}, {[]string{"", "deflate"}, true},
	} {
		if _, got := encoded(http.Header{"Content-Encoding": c.vals}); got != c.want {
			t.Errorf("%q: encoded %v, want %v", c.vals, got, c.want)
		}
	}
}

// TestWriteH1NoReasonNoTrailers: what the child reads of an HTTP/1.1
// response has the standard reason phrase for its code and no trailers,
// whatever the upstream's.
func TestWriteH1NoReasonNoTrailers(t *testing.T) {
	for _, code := range []int{200, 299} {
		resp := &http.Response{StatusCode: code, Status: "200 leaked-value", Header: http.Header{},
			Trailer: http.Header{"X-T": {"leaked-value"}}, ContentLength: -1, Body: io.NopCloser(strings.NewReader("body"))}
		var out bytes.Buffer
		req := &http.Request{Method: "GET", Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1}
		(&inspected{}).writeH1(&out, req, resp, true)
		if strings.Contains(out.String(), "leaked") {
			t.Errorf("%d: the child got %q", code, out.String())
		}
		got, err := http.ReadResponse(bufio.NewReader(&out), req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(got.Body)
		if got.StatusCode != code || string(b) != "body" {
			t.Errorf("%d: %s %q", code, got.Status, b)
		}
	}
}

// TestSigV4EchoScrubbed: an upstream that echoes a re-signed request's
// X-Amz-Security-Token and its Authorization's key id (as S3's
// SignatureDoesNotMatch errors do) gives the child its placeholders, in
// headers and body; the request reaches it without Accept-Encoding (the
// child's client asked for gzip), so an echo comes back readable.
func TestSigV4EchoScrubbed(t *testing.T) {
	const host = "echo.example.test"
	const id, secret, token = "ASIAREALKEYID0000001", "real/secret+key=", "IQoJb3JpZ2luX2VjE/real+session/token=="
	keyPH, secPH, tokPH := NewPlaceholder(), NewPlaceholder(), NewPlaceholder()
	seen := &upstreamSeen{}
	cred := regexp.MustCompile(`Credential=([^/]+)/`)
	uca := standin.TLS(t)
	srv := uca.Serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen.add(r.Header.Get("Accept-Encoding"))
		m := cred.FindStringSubmatch(r.Header.Get("Authorization"))
		tok := r.Header.Get("X-Amz-Security-Token")
		w.Header().Set("X-Echo-Token", tok)
		w.Header().Set("X-Echo-Key", m[1])
		if strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
			w.Header().Set("Content-Encoding", "gzip")
		}
		io.WriteString(w, "<AWSAccessKeyId>"+m[1]+"</AWSAccessKeyId><Token>"+tok+"</Token>"+url.QueryEscape(tok)+" "+
			strings.ReplaceAll(tok, "/", `\/`))
	}), host)
	ca, err := NewAuthority([]string{host}, time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	key := &AWSKey{AccessKeyID: id, SessionToken: token, SecretPlaceholder: secPH, TokenPlaceholder: tokPH}
	insp := &Inspection{CA: ca, Roots: uca.Pool, Inject: []Injection{{Placeholder: keyPH, Secret: secret, Host: host, Port: atoi(t, srv.Port), Form: FormSigV4, AWS: key}}}
	tp := startProxy(t, Config{Resolver: newResolver(host, "127.0.0.1"), Inspect: insp}, []string{host + ":" + srv.Port}, loopback)
	for _, h2 := range []bool{false, true} {
		e := &inspectEnv{tp: tp}
		c := e.client(t, caPool(ca), h2)
		req, _ := http.NewRequest("GET", "https://"+host+":"+srv.Port+"/bucket/key", http.NoBody)
		req.Header.Set("X-Amz-Content-Sha256", emptySHA256)
		creds := aws.Credentials{AccessKeyID: keyPH, SecretAccessKey: secPH, SessionToken: tokPH}
		if err := v4.NewSigner().SignHTTP(context.Background(), creds, req, emptySHA256, "s3", "us-east-1", time.Now(),
			func(o *v4.SignerOptions) { o.DisableURIPathEscaping = true }); err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Accept-Encoding", "gzip") // as a client that decompresses itself would
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		code, body := resp.StatusCode, string(b)+"\n"+resp.Header.Get("X-Echo-Token")+"\n"+resp.Header.Get("X-Echo-Key")
		for _, l := range []string{id, token, url.QueryEscape(token), strings.ReplaceAll(token, "/", `\/`), secret} {
			if strings.Contains(body, l) {
				t.Errorf("h2=%v: the child got %q in %q", h2, l, body)
			}
		}
		if code != 200 || !strings.Contains(body, "<AWSAccessKeyId>"+keyPH+"<") || !strings.Contains(body, "<Token>"+tokPH+"<") ||
			resp.Header.Get("X-Echo-Token") != tokPH || resp.Header.Get("X-Echo-Key") != keyPH {
			t.Errorf("h2=%v: %d %q; want the placeholders echoed", h2, code, body)
		}
	}
	for _, ae := range seen.all() {
		if ae != "" {
			t.Errorf("the upstream was asked for Accept-Encoding %q", ae)
		}
	}
}

// FuzzReplaceReaderForms: with every form of a secret holding "/", "+"
// and "=", however the input is split the output is the same, and holds
// none of the forms.
func FuzzReplaceReaderForms(f *testing.F) {
	const secret = "SE/C+="
	for _, fn := range echoForms {
		f.Add([]byte("a"+fn(secret)+"b"+fn(secret)[:3]), uint8(1))
	}
	f.Add([]byte(`SE\/C+SE%2FC%2B%3DSE%2fC+=`), uint8(2))
	f.Fuzz(func(t *testing.T, data []byte, chunk uint8) {
		rs := replacements([]Injection{{Placeholder: "ph", Secret: secret, Form: FormHeader}}, nil, nil)
		whole, err := io.ReadAll(newReplaceReader(io.NopCloser(bytes.NewReader(data)), rs))
		if err != nil {
			t.Fatal(err)
		}
		r := io.Reader(bytes.NewReader(data))
		if chunk%2 == 1 {
			r = iotest.OneByteReader(r)
		} else {
			r = iotest.HalfReader(r)
		}
		split, err := io.ReadAll(newReplaceReader(io.NopCloser(r), rs))
		if err != nil || !bytes.Equal(split, whole) {
			t.Fatalf("%q: split %q %v; whole %q", data, split, err, whole)
		}
		for _, x := range rs {
			if bytes.Contains(whole, x.old) {
				t.Fatalf("%q: %q still holds %q", data, whole, x.old)
			}
		}
	})
}

// TestScrubOnlyWhereInjected: every response of a host an injection
// names is scrubbed, a request that carried no credential (or went
// outside the injection's path) too; a host no injection names, sent no
// secret, gets its responses through untouched, their length kept.
func TestScrubOnlyWhereInjected(t *testing.T) {
	body := "leak=" + secretTok
	e := newInspectEnvHandler(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		io.WriteString(w, body)
	}, nil, 0, FormBearer, -1)
	for _, h2 := range []bool{false, true} {
		c := e.client(t, caPool(e.ca), h2)
		for _, path := range []string{"/repos/alice/app", "/user"} {
			resp, got := do(t, c, "GET", e.url(apiHost, path), "", "")
			if resp.StatusCode != 200 || got != "leak="+e.placeholder {
				t.Errorf("h2=%v %s %s: %s %q; want the placeholder", h2, apiHost, path, resp.Status, got)
			}
		}
		resp, got := do(t, c, "GET", e.url(otherHost, "/x"), "", "")
		if resp.StatusCode != 200 || got != body || resp.ContentLength != int64(len(body)) {
			t.Errorf("h2=%v %s: %s %q length %d; want the body as sent, its length kept", h2, otherHost, resp.Status, got, resp.ContentLength)
		}
	}
}

// TestReplacementsPruned: a swapped header value ("Bearer <secret>", in
// each form) is left to its secret's replacement, which gives the same
// result: each string kept costs a scan of every body read.
func TestReplacementsPruned(t *testing.T) {
	ph := NewPlaceholder()
	ins := []Injection{{Placeholder: ph, Secret: "s3cr3t-value", Form: FormBearer}}
	rs := replacements(ins, http.Header{"Authorization": {"Bearer " + ph}}, http.Header{"Authorization": {"Bearer s3cr3t-value"}})
	if len(rs) != 2 {
		t.Errorf("%d replacements %q, want the secret and its base64", len(rs), rs)
	}
	for _, s := range []string{"Bearer s3cr3t-value", "Bearer+s3cr3t-value", "Bearer%20s3cr3t-value", "x s3cr3t-value y"} {
		if got := replaceAll(s, rs); strings.Contains(got, "s3cr3t-value") || !strings.Contains(got, ph) {
			t.Errorf("%q -> %q", s, got)
		}
	}
}

// BenchmarkReplaceReader: the scrubber's rate on JSON-like text (where a
// secret's first bytes often occur) and on zeros (the bulk benchmark's
// body).
func BenchmarkReplaceReader(b *testing.B) {
	ph := NewPlaceholder()
	ins := []Injection{{Placeholder: ph, Secret: "s3cr3t-value", Form: FormBearer}}
	rs := replacements(ins, http.Header{"Authorization": {"Bearer " + ph}}, http.Header{"Authorization": {"Bearer s3cr3t-value"}})
	const json = `{"sha":"c3a1b2","url":"https://api.github.com/repos/alice/app/commits/c3a1b2","Bearer":"s3","author":{"login":"bob"}},`
	for name, chunk := range map[string][]byte{"text": []byte(strings.Repeat(json, 1<<20/len(json))), "zeros": make([]byte, 1<<20)} {
		b.Run(name, func(b *testing.B) {
			b.SetBytes(64 << 20)
			for i := 0; i < b.N; i++ {
				r := io.LimitReader(repeatReader(chunk), 64<<20)
				io.Copy(io.Discard, newReplaceReader(io.NopCloser(r), rs))
			}
		})
	}
}

// repeatReader reads its bytes again and again.
type repeatReader []byte

func (r repeatReader) Read(p []byte) (int, error) { return copy(p, r), nil }

// TestInspectStreamsBeforeUpstreamEnds: what the upstream has sent of a
// scrubbed body reaches the child before the upstream sends more (the
// upstream waits for the child to have read it), over HTTP/1.1 kept
// alive (chunked) and closed, and HTTP/2: neither the replacer nor the
// batching of TLS records holds it back.
func TestInspectStreamsBeforeUpstreamEnds(t *testing.T) {
	read := make(chan chan struct{}, 1)
	e := newInspectEnvHandler(t, func(w http.ResponseWriter, r *http.Request) {
		got := <-read
		io.WriteString(w, "part1 "+r.Header.Get("Authorization")+strings.Repeat(".", 200))
		w.(http.Flusher).Flush()
		select {
		case <-got:
			io.WriteString(w, " part2")
		case <-time.After(10 * time.Second):
			io.WriteString(w, " timed-out: the child never saw part1")
		}
	}, nil, 0, FormBearer, -1)
	for _, c := range []struct{ h2, keep bool }{{false, true}, {false, false}, {true, true}} {
		cl := e.client(t, caPool(e.ca), c.h2)
		if c.keep {
			cl = keepAlive(t, cl)
		}
		got := make(chan struct{})
		read <- got
		req, _ := http.NewRequest("GET", e.url(apiHost, "/repos/alice/app"), http.NoBody)
		req.Header.Set("Authorization", "Bearer "+e.placeholder)
		resp, err := cl.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(resp.Body)
		first, err := br.ReadString('.')
		close(got)
		rest, _ := io.ReadAll(br)
		resp.Body.Close()
		body := first + string(rest)
		if err != nil || !strings.HasPrefix(body, "part1 Bearer "+e.placeholder) || !strings.HasSuffix(body, " part2") {
			t.Errorf("h2=%v keep=%v: %v %.80q...%q", c.h2, c.keep, err, body, body[max(0, len(body)-40):])
		}
	}
}
