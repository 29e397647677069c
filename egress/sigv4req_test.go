package egress

import (
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
)

// The proxy sends exactly what it signs. A path with the characters
// canonPath keeps raw (S3 re-escapes them) is sent escaped and verifies;
// a query the signer would drop pairs of, read otherwise than AWS, or
// sort otherwise is refused before it goes upstream, where a
// SignatureDoesNotMatch would quote the canonical request (the real key
// id and session token) back to the child.
func TestSigV4SendsWhatItSigns(t *testing.T) {
	e := newSigV4Env(t, 0)
	c := e.client(t, false)
	s3 := "https://" + s3Host + ":" + e.s3.Port
	for _, key := range []string{"a!.txt", "x$&'()*+,;=:@y", "%C3%A9t%C3%A9", "sp%20ace%2Bplus"} {
		code, body := send(t, c, e.childReq(t, "PUT", s3+"/alpha/"+key, "body of "+key, sha256Hex("body of "+key), "s3"))
		if code != 200 {
			t.Errorf("PUT /alpha/%s: %d %s\nS3: %q", key, code, body, e.s3.Requests())
		}
	}
	for _, stored := range []string{"a!.txt", "x$&'()*+,;=:@y", "été", "sp ace+plus"} {
		if got, ok := e.s3.Object("alpha", stored); !ok || string(got) == "" {
			t.Errorf("S3 holds no object %q", stored)
		}
	}
	ok := "?list-type=2&prefix=dir%2Fc%20d~%2A&delimiter=%2F&encoding-type=url"
	if code, body := send(t, c, withQuery(e.childReq(t, "GET", s3+"/alpha", "", emptySHA256, "s3"), ok)); code != 200 {
		t.Errorf("GET /alpha%s: %d %s", ok, code, body)
	}
	for _, q := range []string{
		"list-type=2&a=1;b=2", // ParseQuery drops it
		"list-type=2&x=%zz",   // a bad escape, dropped
		"list-type=2&prefix=a+b",
		"list-type=2&&prefix=",
		"list-type=2&prefix=",
		"z=1&%C3%A9=1", // sorted by decoded names: z first; by encoded: %C3%A9 first
		"a-=1&a%2F=1",
	} {
		if q == "list-type=2&prefix=" { // a control: the stand-in answers it
			if code, body := send(t, c, withQuery(e.childReq(t, "GET", s3+"/alpha", "", emptySHA256, "s3"), "?"+q)); code != 200 {
				t.Errorf("GET /alpha?%s: %d %s", q, code, body)
			}
			continue
		}
		before := len(e.s3.Requests())
		r := withQuery(e.childReq(t, "GET", s3+"/alpha", "", emptySHA256, "s3"), "?"+q)
		code, body := send(t, c, r)
		if code != http.StatusForbidden || !strings.Contains(body, "query") || !strings.Contains(body, "coily:") {
			t.Errorf("GET /alpha?%s: %d %s, want the proxy's 403 about the query", q, code, body)
		}
		if after := e.s3.Requests(); len(after) != before {
			t.Errorf("GET /alpha?%s reached S3: %q", q, after[before:])
		}
	}
	for _, l := range e.s3.Requests() {
		if strings.HasPrefix(l, "403") {
			t.Errorf("S3 refused %q", l)
		}
	}
}

// withQuery sets r's raw query after the child signed it (the child's
// signer re-encodes the query it signs; a hostile child sends another).
func withQuery(r *http.Request, q string) *http.Request {
	r.URL.RawQuery = strings.TrimPrefix(q, "?")
	return r
}

// A key injected under /alpha/ copies only from /alpha/: every header
// the child sends is signed, so x-amz-copy-source naming another bucket
// would copy from outside the prefix with the real key.
func TestSigV4CopySourceConfined(t *testing.T) {
	e := newSigV4EnvPrefix(t, 0, "/alpha/")
	c := e.client(t, false)
	s3 := "https://" + s3Host + ":" + e.s3.Port
	put := func(headers ...string) *http.Request {
		r := e.childReq(t, "PUT", s3+"/alpha/copy.txt", "", emptySHA256, "s3")
		for i := 0; i+1 < len(headers); i += 2 {
			r.Header.Add(headers[i], headers[i+1])
		}
		return r
	}
	for _, h := range [][]string{
		{"X-Amz-Copy-Source", "/alpha/a.txt"},
		{"X-Amz-Copy-Source", "alpha/a.txt?versionId=3"},
		{"X-Amz-Copy-Source", "%61lpha/dir/b%20c.txt"},
		{"X-Amz-Copy-Source", "/alpha/a.txt", "X-Amz-Copy-Source-If-Match", `"abc"`},
		{"X-Amz-Meta-Note", "no copy at all"},
	} {
		if code, body := send(t, c, put(h...)); code != 200 {
			t.Errorf("PUT with %q: %d %s", h, code, body)
		}
	}
	for _, h := range [][]string{
		{"X-Amz-Copy-Source", "/beta/secret.txt"},
		{"X-Amz-Copy-Source", "beta/secret.txt"},
		{"X-Amz-Copy-Source", "/alphabet/x"},
		{"X-Amz-Copy-Source", "/alpha/../beta/secret.txt"},
		{"X-Amz-Copy-Source", "/alpha/%2E%2E/beta/secret.txt"},
		{"X-Amz-Copy-Source", "alpha%2F..%2Fbeta/secret.txt"},
		{"X-Amz-Copy-Source", "arn:aws:s3:us-east-1:123456789012:accesspoint/ap/object/alpha/a.txt"},
		{"X-Amz-Copy-Source", "/alpha/a.txt", "X-Amz-Copy-Source", "/beta/secret.txt"},
		{"X-Amz-Copy-Source-Range", "bytes=0-9"},
		{"X-Amz-Rename-Source", "/beta/secret.txt"},
	} {
		before := len(e.s3.Requests())
		code, body := send(t, c, put(h...))
		if code != http.StatusForbidden || !strings.Contains(body, "copy-source") {
			t.Errorf("PUT with %q: %d %s, want the proxy's 403", h, code, body)
		}
		if after := e.s3.Requests(); len(after) != before {
			t.Errorf("PUT with %q reached S3: %q", h, after[before:])
		}
	}
}

func TestCheckCopySourceVirtualHosted(t *testing.T) {
	in := Injection{Host: "bucket-a.s3.us-east-1.amazonaws.com", PathPrefix: "/dir/"}
	for src, ok := range map[string]bool{
		"bucket-a/dir/x": true, "/bucket-a/dir/sub/y?versionId=1": true,
		"dir/x": false, "/bucket-b/dir/x": false, "bucket-a/other/x": false,
	} {
		h := http.Header{"X-Amz-Copy-Source": {src}}
		if err := checkCopySource(h, in); (err == nil) != ok {
			t.Errorf("copy source %q on %s: %v, want allowed %v", src, in.Host, err, ok)
		}
	}
}

func TestS3Path(t *testing.T) {
	for in, want := range map[string]string{
		"/alpha/a!.txt":   "/alpha/a%21.txt",
		"/a/$&'()*+,;=:@": "/a/%24%26%27%28%29%2A%2B%2C%3B%3D%3A%40",
		"/a/%C3%A9~-._":   "/a/%C3%A9~-._",
		"/":               "/",
	} {
		if got := s3Path(in); got != want {
			t.Errorf("s3Path(%q) = %q, want %q", in, got, want)
		}
	}
}

// checkSigV4Query's hostile table, also the fuzz target's seeds.
var sigV4Queries = map[string]bool{
	"": true, "acl": true, "list-type=2&prefix=a%2Fb&delimiter=%2F": true, "a=%7E&b=": true,
	"a=1;b=2": false, "x=%zz": false, "a=b+c": false, "a=b c": false, "a&&b": false, "a&": false, "&a": false,
	"z=1&%C3%A9=1": false, "a-=1&a%2F=1": false, "a=\x00": false, "a=\xff": false,
}

func TestCheckSigV4Query(t *testing.T) {
	for q, ok := range sigV4Queries {
		if err := checkSigV4Query(q); (err == nil) != ok {
			t.Errorf("checkSigV4Query(%q) = %v, want allowed %v", q, err, ok)
		}
	}
}

// FuzzCheckSigV4Query: a query checkSigV4Query lets through is one the
// signer and AWS canonicalise alike.
func FuzzCheckSigV4Query(f *testing.F) {
	for q := range sigV4Queries {
		f.Add(q)
	}
	f.Fuzz(func(t *testing.T, q string) {
		if checkSigV4Query(q) != nil {
			return
		}
		vals, err := url.ParseQuery(q)
		if err != nil {
			t.Fatalf("%q allowed but does not parse: %v", q, err)
		}
		if goCanonicalQuery(vals) != awsCanonicalQuery(vals) {
			t.Fatalf("%q allowed but canonicalised differently", q)
		}
	})
}

// The proxy buffers at most two SigV4 bodies without a payload hash at
// once: with two requests holding a buffer (their bodies stalled), a
// third waits, and goes upstream only after one of the two is done.
func TestSigV4BuffersTwoAtATime(t *testing.T) {
	e := newSigV4Env(t, 0)
	c := e.client(t, false)
	s3 := "https://" + s3Host + ":" + e.s3.Port
	type result struct {
		name string
		code int
	}
	done := make(chan result, 3)
	start := func(name string, body string, stall bool) *io.PipeWriter {
		r := e.childReq(t, "PUT", s3+"/alpha/"+name, body, "", "s3")
		pr, pw := io.Pipe()
		r.Body, r.GetBody, r.ContentLength = pr, nil, int64(len(body))
		go func() {
			resp, err := c.Do(r)
			if err != nil {
				done <- result{name, -1}
				return
			}
			resp.Body.Close()
			done <- result{name, resp.StatusCode}
		}()
		half := len(body)
		if stall {
			half = len(body) / 2
		}
		go func() { // ends when read, or when pw is closed
			pw.Write([]byte(body[:half]))
			if !stall {
				pw.Close()
			}
		}()
		return pw
	}
	body := strings.Repeat("x", 4096)
	one := start("one", body, true)
	two := start("two", body, true)
	t.Cleanup(func() { one.Close(); two.Close() })
	waitFor(t, "two requests holding the two buffers", func() bool { return len(e.tp.sigv4Buf) == 2 })
	start("three", "whole", false)
	waitFor(t, "a third request waiting for a buffer", func() bool { return e.tp.sigv4Waiting.Load() == 1 })
	if got := e.s3.Requests(); len(got) != 0 {
		t.Fatalf("S3 saw %q while the bodies were stalled", got)
	}
	go func() { one.Write([]byte(body[len(body)/2:])); one.Close() }()
	for range 2 {
		if r := <-done; r.name == "two" || r.code != 400 { // the stand-in wants X-Amz-Content-Sha256: 400, after the signature
			t.Fatalf("%s finished with %d", r.name, r.code)
		}
	}
	if got, want := e.s3.Requests(), []string{"400 PUT /alpha/one MissingContentSha256", "400 PUT /alpha/three MissingContentSha256"}; !slices.Equal(got, want) {
		t.Fatalf("S3 saw %q, want %q", got, want)
	}
	two.CloseWithError(io.ErrUnexpectedEOF)
	<-done
}

// FuzzCheckCopySource: a copy source allowed under /alpha/ names, as S3
// decodes it, an object of bucket alpha.
func FuzzCheckCopySource(f *testing.F) {
	for _, s := range []string{"/alpha/a.txt", "alpha/a.txt?versionId=3", "%61lpha/x", "/beta/x", "/alpha/../beta/x",
		"alpha%2F..%2Fbeta/x", "arn:aws:s3:us-east-1:1:accesspoint/ap/object/alpha/a", "/alphabet/x", "alpha/%2e%2e/beta"} {
		f.Add(s)
	}
	in := Injection{Host: s3Host, PathPrefix: "/alpha/"}
	f.Fuzz(func(t *testing.T, src string) {
		if checkCopySource(http.Header{"X-Amz-Copy-Source": {src}}, in) != nil {
			return
		}
		p, _, _ := strings.Cut(src, "?")
		dec, err := url.PathUnescape(strings.TrimPrefix(p, "/"))
		if err != nil {
			t.Fatalf("%q allowed but does not decode: %v", src, err)
		}
		bucket, key, _ := strings.Cut(dec, "/")
		if bucket != "alpha" || strings.Contains("/"+key+"/", "/../") || strings.Contains("/"+key+"/", "/./") {
			t.Fatalf("%q allowed: bucket %q, key %q", src, bucket, key)
		}
	})
}
