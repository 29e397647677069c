package egress

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"testing/iotest"
)

// echoAuth is an upstream that hands the request's Authorization back in
// a response header, in its body (split across flushes, after enough
// bytes that the proxy reads it in several pieces) and in a trailer;
// or, as the query asks, in its reason phrase, or in the body in the
// forms JSON and URLs write it.
// bigEchoes is how many times ?big=1 echoes the Authorization, over
// about 1.4 MiB: past the read-ahead's first 256 KiB.
const bigEchoes = 60

func echoAuth(w http.ResponseWriter, r *http.Request) {
	a := r.Header.Get("Authorization")
	w.Header().Set("X-Echo", a)
	w.Header().Set("Content-Type", "text/plain")
	switch r.URL.Query().Get("gz") { // an encoding the proxy cannot read through
	case "1":
		w.Header().Set("Content-Encoding", "gzip")
	case "2": // identity first, gzip second
		w.Header().Add("Content-Encoding", "identity")
		w.Header().Add("Content-Encoding", "gzip")
	case "3":
		w.Header().Set("Content-Encoding", "identity, gzip")
	}
	if r.URL.Query().Get("gz") != "" {
		io.WriteString(w, "\x1f\x8b"+a)
		return
	}
	if r.URL.Query().Get("reason") == "1" { // the secret in the status line
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		defer c.Close()
		brw.WriteString("HTTP/1.1 200 OK " + a + "\r\nContent-Length: 2\r\n\r\nok")
		brw.Flush()
		return
	}
	if r.URL.Query().Get("enc") == "1" {
		json := strings.ReplaceAll(a, "/", `\/`)
		io.WriteString(w, strings.Join([]string{json, url.QueryEscape(a), url.PathEscape(a), strings.ToLower(url.QueryEscape(a))}, "\n"))
		return
	}
	if r.URL.Query().Get("big") == "1" { // past the read-ahead's start, split anywhere
		for i := range bigEchoes {
			io.WriteString(w, strings.Repeat("z", 9000+i*331)+"auth=")
			k := i % len(a)
			io.WriteString(w, a[:k])
			w.(http.Flusher).Flush()
			io.WriteString(w, a[k:]+"\n")
		}
		return
	}
	if r.URL.Query().Get("len") == "1" { // a response that says its length
		body := "auth=" + a + "\n"
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		io.WriteString(w, body)
		return
	}
	w.Header().Set("Trailer", "X-Echo-Trailer")
	io.WriteString(w, strings.Repeat("x", 40000)+"auth=")
	half := len(a) / 2
	io.WriteString(w, a[:half])
	w.(http.Flusher).Flush()
	io.WriteString(w, a[half:]+"\n"+strings.Repeat("y", 70000))
	w.Header().Set("X-Echo-Trailer", a)
}

// TestInspectEchoedSecretReplaced: an upstream that echoes the request's
// Authorization hands the child back the placeholder, never the secret,
// in headers and bodies, over HTTP/1.1 (a connection kept alive, so
// bodies of unknown length are chunked, and closed after each response)
// and HTTP/2, Bearer and Basic (whose secret is inside base64), a body
// that says its length and one that does not. Trailers and the reason
// phrase are not passed on; the JSON and percent-encoded forms of the
// echo are replaced too.
func TestInspectEchoedSecretReplaced(t *testing.T) {
	for _, form := range []Form{FormBearer, FormBasic} {
		e := newInspectEnvHandler(t, echoAuth, nil, 0, form, -1)
		auth := "Bearer " + e.placeholder
		if form == FormBasic {
			auth = "Basic " + b64("x-access-token:"+e.placeholder)
		}
		// Base64 without its padding still decodes to the secret.
		leaks := []string{secretTok, strings.TrimRight(b64("x-access-token:"+secretTok), "=")}
		leaked := func(what string, got ...string) {
			t.Helper()
			for _, l := range leaks {
				if strings.Contains(strings.Join(got, "\n"), l) {
					t.Errorf("%v %s: the child was handed the secret (%q)", form, what, l)
				}
			}
		}
		for _, c := range []struct {
			h2, keep bool
		}{{false, false}, {false, true}, {true, false}, {true, true}} {
			cl := e.client(t, caPool(e.ca), c.h2)
			if c.keep {
				cl = keepAlive(t, cl)
			}
			what := fmt.Sprintf("h2=%v keep-alive=%v", c.h2, c.keep)
			for _, q := range []string{"", "?len=1"} {
				resp, body := do(t, cl, "GET", e.url(apiHost, "/repos/alice/app"+q), auth, "")
				leaked(what+" "+q, resp.Status, fmt.Sprint(resp.Header), fmt.Sprint(resp.Trailer), body)
				if resp.StatusCode != 200 || resp.Header.Get("X-Echo") != auth || !strings.Contains(body, "auth="+auth+"\n") {
					t.Errorf("%v %s %q: %s echo %q, body has the placeholder: %v", form, what, q, resp.Status, resp.Header.Get("X-Echo"), strings.Contains(body, auth))
				}
				if q == "" && len(body) != 40000+len("auth=")+len(auth)+1+70000 {
					t.Errorf("%v %s: body of %d bytes", form, what, len(body))
				}
				if c.keep && !c.h2 && q == "" && (len(resp.TransferEncoding) == 0 || resp.TransferEncoding[0] != "chunked") {
					t.Errorf("%v %s: transfer encoding %q, want the chunked body this test is for", form, what, resp.TransferEncoding)
				}
				if len(resp.Trailer) != 0 {
					t.Errorf("%v %s: trailers %q passed on", form, what, resp.Trailer)
				}
			}
			resp, body := do(t, cl, "GET", e.url(apiHost, "/repos/alice/app?big=1"), auth, "")
			leaked(what+" big", body)
			if n := strings.Count(body, "auth="+auth+"\n"); resp.StatusCode != 200 || n != bigEchoes {
				t.Errorf("%v %s: big: %s, %d echoes of the placeholder, want %d", form, what, resp.Status, n, bigEchoes)
			}
			resp, body = do(t, cl, "GET", e.url(apiHost, "/repos/alice/app?enc=1"), auth, "")
			leaked(what+" encoded forms", body)
			if resp.StatusCode != 200 || !strings.Contains(body, url.QueryEscape(auth)) {
				t.Errorf("%v %s: encoded forms: %s %q", form, what, resp.Status, body)
			}
			if !c.h2 {
				resp, body = do(t, cl, "GET", e.url(apiHost, "/repos/alice/app?reason=1"), auth, "")
				leaked(what+" reason phrase", resp.Status, body)
				if resp.StatusCode != 200 || body != "ok" {
					t.Errorf("%v %s: reason phrase: %s %q", form, what, resp.Status, body)
				}
			}
		}
		for _, gz := range []string{"1", "2", "3"} {
			resp, body := do(t, e.client(t, caPool(e.ca), false), "GET", e.url(apiHost, "/repos/alice/app?gz="+gz), auth, "")
			if resp.StatusCode != http.StatusBadGateway || strings.Contains(body, secretTok) || !strings.Contains(body, "Content-Encoding") {
				t.Errorf("%v gz=%s: an encoded answer to an injected request: %s %q; want 502 naming the encoding", form, gz, resp.Status, body)
			}
		}
		for _, s := range e.seen.all() {
			if strings.Contains(s, "Accept-Encoding") {
				t.Errorf("%v: an injected request asked for an encoding: %q", form, s)
			}
			if !strings.Contains(s, secretTok) && !strings.Contains(s, b64("x-access-token:"+secretTok)) {
				t.Errorf("%v: the upstream did not get the secret: %q", form, s)
			}
		}
	}
}

// TestReplaceReader: every old string becomes its new one wherever the
// reads split it, and nothing else changes.
func TestReplaceReader(t *testing.T) {
	pairs := []replacement{{old: []byte("SECRET-LONG-VALUE"), new: []byte("ph")}, {old: []byte("U0VD"), new: []byte("cGg=")}}
	cases := map[string]string{
		"":                                     "",
		"plain":                                "plain",
		"SECRET-LONG-VALUE":                    "ph",
		"aSECRET-LONG-VALUEbSECRET-LONG-VALUE": "aphbph",
		"SECRET-LONG-VALU":                     "SECRET-LONG-VALU",
		"SSECRET-LONG-VALUE":                   "Sph",
		"U0VDSECRET-LONG-VALUEU0V":             "cGg=phU0V",
		strings.Repeat("z", 70000) + "SECRET-LONG-VALUE" + strings.Repeat("w", 5): strings.Repeat("z", 70000) + "ph" + strings.Repeat("w", 5),
	}
	for in, want := range cases {
		for _, wrap := range []func(io.Reader) io.Reader{func(r io.Reader) io.Reader { return r }, iotest.OneByteReader, iotest.HalfReader} {
			out, err := io.ReadAll(newReplaceReader(io.NopCloser(wrap(strings.NewReader(in))), pairs))
			if err != nil || string(out) != want {
				t.Errorf("%.40q: %.40q %v; want %.40q", in, out, err, want)
			}
		}
	}
}

// FuzzReplaceReader: however the input is split, the output is what a
// whole-string replacement gives.
func FuzzReplaceReader(f *testing.F) {
	f.Add([]byte("aSECRETbSEC"), uint8(1))
	f.Add([]byte("SECSECRETRET"), uint8(3))
	f.Fuzz(func(t *testing.T, data []byte, chunk uint8) {
		pairs := []replacement{{old: []byte("SECRET"), new: []byte("p")}}
		r := io.Reader(bytes.NewReader(data))
		if chunk%2 == 1 {
			r = iotest.OneByteReader(r)
		} else if chunk%3 == 0 {
			r = iotest.HalfReader(r)
		}
		want := bytes.ReplaceAll(data, []byte("SECRET"), []byte("p"))
		out, err := io.ReadAll(newReplaceReader(io.NopCloser(r), pairs))
		if err != nil || !bytes.Equal(out, want) {
			t.Fatalf("%q: %q %v; want %q", data, out, err, want)
		}
		// Read by the reader's own small sizes too: the in-place path
		// runs only when p has room.
		out, err = readAllBy(newReplaceReader(io.NopCloser(bytes.NewReader(data)), pairs), 1+int(chunk)%23)
		if err != nil || !bytes.Equal(out, want) {
			t.Fatalf("%q by %d: %q %v; want %q", data, 1+int(chunk)%23, out, err, want)
		}
	})
}

// readAllBy reads r to its end size bytes at a time at most.
func readAllBy(r io.Reader, size int) ([]byte, error) {
	var out []byte
	p := make([]byte, size)
	for {
		n, err := r.Read(p)
		out = append(out, p[:n]...)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return out, err
		}
	}
}

// TestReplaceReaderBoundedWithSecrets: a body with a secret in every
// read is scrubbed in bounded memory whatever the caller's buffer (the
// in-place path's fallback once kept every such read).
func TestReplaceReaderBoundedWithSecrets(t *testing.T) {
	pairs := []replacement{{old: []byte("SECRET-LONG-VALUE"), new: []byte("ph")}}
	var body bytes.Buffer
	for body.Len() < 4<<20 {
		body.WriteString(strings.Repeat("q", 30000) + "SECRET-LONG-VALUE")
	}
	rr := newReplaceReader(io.NopCloser(&body), pairs)
	p := make([]byte, 32<<10)
	n := 0
	for {
		k, err := rr.Read(p)
		n += k
		if bytes.Contains(p[:k], []byte("SECRET")) {
			t.Fatal("a read handed out the secret")
		}
		if err != nil {
			break
		}
		if c := cap(rr.out) + cap(rr.buf); c > 4*replaceRead {
			t.Fatalf("after %d bytes the reader holds %d bytes of buffers", n, c)
		}
	}
}
