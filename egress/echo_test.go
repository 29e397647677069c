package egress

import (
	"bytes"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"testing/iotest"
)

// echoAuth is an upstream that hands the request's Authorization back in
// a response header, in its body (split across flushes, after enough
// bytes that the proxy reads it in several pieces) and, for a HEAD, in
// the header only.
func echoAuth(w http.ResponseWriter, r *http.Request) {
	a := r.Header.Get("Authorization")
	w.Header().Set("X-Echo", a)
	w.Header().Set("Content-Type", "text/plain")
	if r.URL.Query().Get("gz") == "1" { // an encoding the proxy cannot read through
		w.Header().Set("Content-Encoding", "gzip")
		io.WriteString(w, "\x1f\x8b"+a)
		return
	}
	if r.URL.Query().Get("len") == "1" { // a response that says its length
		body := "auth=" + a + "\n"
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		io.WriteString(w, body)
		return
	}
	io.WriteString(w, strings.Repeat("x", 40000)+"auth=")
	half := len(a) / 2
	io.WriteString(w, a[:half])
	w.(http.Flusher).Flush()
	io.WriteString(w, a[half:]+"\n"+strings.Repeat("y", 70000))
}

// TestInspectEchoedSecretReplaced: an upstream that echoes the request's
// Authorization hands the child back the placeholder, never the secret,
// in headers and bodies, over HTTP/1.1 and HTTP/2, Bearer and Basic
// (whose secret is inside base64), a body that says its length and one
// that does not.
func TestInspectEchoedSecretReplaced(t *testing.T) {
	for _, form := range []Form{FormBearer, FormBasic} {
		e := newInspectEnvHandler(t, echoAuth, nil, 0, form, -1)
		auth := "Bearer " + e.placeholder
		if form == FormBasic {
			auth = "Basic " + b64("x-access-token:"+e.placeholder)
		}
		leaks := []string{secretTok, b64("x-access-token:" + secretTok)}
		for _, h2 := range []bool{false, true} {
			c := e.client(t, caPool(e.ca), h2)
			for _, q := range []string{"", "?len=1"} {
				resp, body := do(t, c, "GET", e.url(apiHost, "/repos/alice/app"+q), auth, "")
				got := resp.Header.Get("X-Echo") + "\n" + body
				for _, l := range leaks {
					if strings.Contains(got, l) {
						t.Errorf("%v h2=%v %q: the child was handed the secret (%q)", form, h2, q, l)
					}
				}
				if resp.StatusCode != 200 || resp.Header.Get("X-Echo") != auth || !strings.Contains(body, "auth="+auth+"\n") {
					t.Errorf("%v h2=%v %q: %s echo %q, body has the placeholder: %v", form, h2, q, resp.Status, resp.Header.Get("X-Echo"), strings.Contains(body, auth))
				}
				if q == "" && len(body) != 40000+len("auth=")+len(auth)+1+70000 {
					t.Errorf("%v h2=%v: body of %d bytes", form, h2, len(body))
				}
			}
		}
		resp, body := do(t, e.client(t, caPool(e.ca), false), "GET", e.url(apiHost, "/repos/alice/app?gz=1"), auth, "")
		if resp.StatusCode != http.StatusBadGateway || strings.Contains(body, secretTok) || !strings.Contains(body, "Content-Encoding") {
			t.Errorf("%v: an encoded answer to an injected request: %s %q; want 502 naming the encoding", form, resp.Status, body)
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
		out, err := io.ReadAll(newReplaceReader(io.NopCloser(r), pairs))
		if want := bytes.ReplaceAll(data, []byte("SECRET"), []byte("p")); err != nil || !bytes.Equal(out, want) {
			t.Fatalf("%q: %q %v; want %q", data, out, err, want)
		}
	})
}
