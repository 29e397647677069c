package egress

import (
	"bufio"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"coily.dev/coily/internal/standin"
)

const (
	apiHost    = "api.example.test"
	otherHost  = "other.example.test"
	tunnelHost = "tunnel.example.test"
	secretTok  = "ghp_REALSECRETTOKEN0123456789"
)

// upstreamSeen records every request an upstream received, raw enough to
// find a placeholder or a secret anywhere in it.
type upstreamSeen struct {
	mu   sync.Mutex
	reqs []string
}

func (u *upstreamSeen) add(s string) { u.mu.Lock(); u.reqs = append(u.reqs, s); u.mu.Unlock() }
func (u *upstreamSeen) all() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.reqs...)
}

// inspectEnv is a proxy that inspects apiHost and otherHost and tunnels
// tunnelHost, all served by one TLS upstream of a test CA.
type inspectEnv struct {
	tp          *testProxy
	ca          *Authority
	upstreamCA  *standin.CA
	port        string
	seen        *upstreamSeen
	placeholder string
	caFile      string
}

func newInspectEnv(t *testing.T, rules map[string][]HTTPRule, maxBody int64, form Form) *inspectEnv {
	t.Helper()
	return newInspectEnvPort(t, rules, maxBody, form, -1)
}

// newInspectEnvPort: the injection's port is injPort (-1: the upstream's).
func newInspectEnvPort(t *testing.T, rules map[string][]HTTPRule, maxBody int64, form Form, injPort int) *inspectEnv {
	t.Helper()
	return newInspectEnvHandler(t, nil, rules, maxBody, form, injPort)
}

// newInspectEnvHandler: the upstream answers with h (nil: the default
// handler, which says whether the secret arrived); every request is seen.
func newInspectEnvHandler(t *testing.T, h http.HandlerFunc, rules map[string][]HTTPRule, maxBody int64, form Form, injPort int) *inspectEnv {
	t.Helper()
	seen := &upstreamSeen{}
	uca := standin.TLS(t)
	srv := uca.Serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if h != nil {
			seen.add(fmt.Sprintf("%s %s %s %v", r.Method, r.Host, r.URL.RequestURI(), r.Header))
			h(w, r)
			return
		}
		body, _ := io.ReadAll(r.Body)
		seen.add(fmt.Sprintf("%s %s %s %v %s", r.Method, r.Host, r.URL.RequestURI(), r.Header, body))
		auth := "none"
		switch r.Header.Get("Authorization") {
		case "Bearer " + secretTok, "token " + secretTok:
			auth = "secret"
		}
		fmt.Fprintf(w, "auth=%s path=%s body=%d", auth, r.URL.Path, len(body))
	}), apiHost, otherHost, tunnelHost)
	ca, err := NewAuthority([]string{apiHost, otherHost}, time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	ph := NewPlaceholder()
	if injPort < 0 {
		injPort, _ = strconv.Atoi(srv.Port)
	}
	insp := &Inspection{CA: ca, Roots: uca.Pool, Rules: rules, MaxBody: maxBody,
		Inject: []Injection{{Placeholder: ph, Secret: secretTok, Host: apiHost, Port: injPort, PathPrefix: "/repos/", Form: form}}}
	res := newResolver(apiHost, "127.0.0.1", otherHost, "127.0.0.1", tunnelHost, "127.0.0.1")
	tp := startProxy(t, Config{Resolver: res, Inspect: insp},
		[]string{apiHost + ":" + srv.Port, otherHost + ":" + srv.Port, tunnelHost + ":" + srv.Port}, loopback)
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, ca.CertPEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	return &inspectEnv{tp: tp, ca: ca, upstreamCA: uca, port: srv.Port, seen: seen, placeholder: ph, caFile: caFile}
}

// client trusts roots and offers HTTP/2 alone when h2, HTTP/1.1 alone
// when not.
func (e *inspectEnv) client(t *testing.T, roots *x509.CertPool, h2 bool) *http.Client {
	if h2 {
		return e.tp.client(t, h2Only(roots))
	}
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}
	tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
	return e.tp.client(t, tr)
}

func (e *inspectEnv) url(host, path string) string { return "https://" + host + ":" + e.port + path }

func caPool(ca *Authority) *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Certificate())
	return p
}

func do(t *testing.T, c *http.Client, method, url, auth, body string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body == "" {
		req.Body, req.ContentLength = http.NoBody, 0
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func TestInspectInjectsOverHTTP1AndHTTP2(t *testing.T) {
	e := newInspectEnv(t, nil, 0, FormBearer)
	for _, h2 := range []bool{false, true} {
		c := e.client(t, caPool(e.ca), h2)
		resp, body := do(t, c, "GET", e.url(apiHost, "/repos/alice/app?x=1"), "Bearer "+e.placeholder, "")
		wantProto := map[bool]string{false: "HTTP/1.1", true: "HTTP/2.0"}[h2]
		if resp.StatusCode != 200 || body != "auth=secret path=/repos/alice/app body=0" || resp.Proto != wantProto {
			t.Errorf("h2=%v: %s %s %q; want 200 %s with the secret injected", h2, resp.Proto, resp.Status, body, wantProto)
		}
		if leaf := resp.TLS.PeerCertificates[0]; leaf.Issuer.CommonName != e.ca.Certificate().Subject.CommonName {
			t.Errorf("h2=%v: the client saw a certificate by %q, not the exec's CA", h2, leaf.Issuer)
		}
	}
	// Several requests on one kept-alive HTTP/1.1 connection.
	c := e.client(t, caPool(e.ca), false)
	c.Transport.(*http.Transport).DisableKeepAlives = false
	for i := range 3 {
		if resp, body := do(t, c, "POST", e.url(apiHost, "/repos/alice/app/issues"), "Bearer "+e.placeholder, "hello"); resp.StatusCode != 200 || !strings.Contains(body, "auth=secret") || !strings.Contains(body, "body=5") {
			t.Errorf("request %d: %s %q", i, resp.Status, body)
		}
	}
	// A row is added once its response is written: the client can read
	// the response first.
	var reqs []RequestRow
	waitFor(t, "5 request rows", func() bool { reqs, _ = e.tp.Requests(); return len(reqs) >= 5 })
	if len(reqs) != 5 {
		t.Fatalf("request rows %+v, want 5", reqs)
	}
	if r := reqs[0]; r.Method.String() != "GET" || r.Path.String() != "/repos/alice/app" || r.Status != 200 || !r.Injected || r.Decision != Allow || r.BytesDown == 0 {
		t.Errorf("first request row %+v: want GET /repos/alice/app (query stripped), 200, injected, bytes down", r)
	}
	// The query is named by its hash: rows with the same query match, and
	// an owner who suspects one can check it.
	sum := sha256.Sum256([]byte("x=1"))
	if q := reqs[0].Query; q != "sha256:"+hex.EncodeToString(sum[:])[:32] || q != reqs[1].Query || reqs[2].Query != "" {
		t.Errorf("query hashes %q %q %q: want sha256 of x=1 twice, then none", reqs[0].Query, reqs[1].Query, reqs[2].Query)
	}
	for _, s := range e.seen.all() {
		if strings.Contains(s, e.placeholder) {
			t.Errorf("the upstream saw the placeholder: %q", s)
		}
	}
}

// A request outside the injection's path prefix keeps no secret: its
// placeholder is refused.
func TestInspectPlaceholderRefused(t *testing.T) {
	e := newInspectEnv(t, nil, 0, FormBearer)
	c := e.client(t, caPool(e.ca), false)
	ph := e.placeholder
	basic := "Basic " + b64("x-access-token:"+ph)
	cases := []struct {
		name, method, url, auth, body string
	}{
		{"another inspected host", "GET", e.url(otherHost, "/repos/alice/app"), "Bearer " + ph, ""},
		{"outside the path prefix", "GET", e.url(apiHost, "/user"), "Bearer " + ph, ""},
		{"prefix without its slash", "GET", e.url(apiHost, "/reposx"), "Bearer " + ph, ""},
		{"wrong scheme", "GET", e.url(apiHost, "/repos/a"), "token " + ph, ""},
		{"basic-encoded", "GET", e.url(apiHost, "/repos/a"), basic, ""},
		{"in the query", "GET", e.url(apiHost, "/repos/a?t="+ph), "", ""},
		{"escaped in the query", "GET", e.url(apiHost, "/repos/a?t="+strings.ReplaceAll(ph, "-", "%2D")), "", ""},
		{"in the path", "GET", e.url(apiHost, "/repos/"+ph), "", ""},
		{"in a body", "POST", e.url(apiHost, "/repos/a"), "", `{"token":"` + ph + `"}`},
		{"in a body to another host", "POST", e.url(otherHost, "/x"), "", strings.Repeat("a", 100000) + ph},
	}
	for _, tc := range cases {
		before := len(e.seen.all())
		resp, body := do(t, c, tc.method, tc.url, tc.auth, tc.body)
		if resp.StatusCode != 403 || resp.Header.Get("X-Coily-Egress") != "refused" || !strings.Contains(body, "placeholder") {
			t.Errorf("%s: %s %q; want 403 naming the placeholder", tc.name, resp.Status, body)
		}
		for _, s := range e.seen.all()[before:] {
			if strings.Contains(s, ph) || strings.Contains(s, secretTok) {
				t.Errorf("%s: the upstream saw %q", tc.name, s)
			}
		}
	}
	var other http.Header = http.Header{"X-Token": {ph}}
	req, _ := http.NewRequest("GET", e.url(apiHost, "/repos/a"), nil)
	req.Header = other
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 403 {
		t.Errorf("placeholder in another header: %s; want 403", resp.Status)
	}
}

func TestInspectHTTPRulesAndBodyCap(t *testing.T) {
	rules := map[string][]HTTPRule{apiHost: {mustRule(t, "GET /repos/alice/app/**"), mustRule(t, "POST /repos/alice/app/issues")}}
	e := newInspectEnv(t, rules, 1000, FormBearer)
	c := e.client(t, caPool(e.ca), true)
	cases := []struct {
		method, path, body string
		status             int
	}{
		{"GET", "/repos/alice/app", "", 200},
		{"GET", "/repos/alice/app/pulls/1", "", 200},
		{"POST", "/repos/alice/app/issues", "x", 200},
		{"POST", "/repos/alice/app/issues", strings.Repeat("x", 1001), 403},
		{"DELETE", "/repos/alice/app", "", 403},
		{"GET", "/repos/bob/app", "", 403},
		{"GET", "/repos/alice/app/%2e%2e/x", "", 403}, // an encoded dot segment is one (nginx and most frameworks decode it)
		{"GET", "/repos/alice/app/%2e%2e/%2e%2e/%2e%2e/user", "", 403},
		{"GET", "/user", "", 403},
	}
	for _, tc := range cases {
		resp, body := do(t, c, tc.method, e.url(apiHost, tc.path), "", tc.body)
		if resp.StatusCode != tc.status {
			t.Errorf("%s %s: %s %q; want %d", tc.method, tc.path, resp.Status, body, tc.status)
		}
	}
	// otherHost has no rules: everything goes.
	if resp, _ := do(t, c, "DELETE", e.url(otherHost, "/anything"), "", ""); resp.StatusCode != 200 {
		t.Errorf("DELETE on a host without rules: %s", resp.Status)
	}
	var reqs []RequestRow
	waitFor(t, "a request row each", func() bool { reqs, _ = e.tp.Requests(); return len(reqs) >= len(cases)+1 })
	var denied int
	for _, r := range reqs {
		if r.Decision == Deny {
			denied++
			if r.Status != 403 || (r.Reason != reasonHTTPRule && r.Reason != reasonBodyCap && r.Reason != reasonPath) {
				t.Errorf("denied row %+v", r)
			}
		}
	}
	if denied != 6 {
		t.Errorf("%d denied request rows, want 6: %+v", denied, reqs)
	}
}

// TestInspectInjectDotSegments: with the injection's prefix /repos/, a
// path that leaves it once normalised (as nginx, Envoy and most
// frameworks do) is refused with 403 and a row, over HTTP/1.1 and
// HTTP/2, and the upstream never sees the secret.
func TestInspectInjectDotSegments(t *testing.T) {
	e := newInspectEnv(t, nil, 0, FormBearer)
	paths := []string{"/repos/../user", "/repos/%2e%2e/user", "/repos/%2E%2e/user", "/repos/./../user", "/repos/alice/%2e%2e/%2e%2e/user",
		"/repos/org%2f..%2f..%2fuser", "/repos/a%5c..%5cuser", "/repos//user", "/repos/..;/user", "/repos/a%00"}
	for _, p := range paths { // HTTP/1.1, the request line as written
		_, _, c := e.tp.raw(t, connect(apiHost+":"+e.port))
		tc := tls.Client(c, &tls.Config{ServerName: apiHost, RootCAs: caPool(e.ca), NextProtos: []string{"http/1.1"}})
		fmt.Fprintf(tc, "GET %s HTTP/1.1\r\nHost: %s:%s\r\nAuthorization: Bearer %s\r\nConnection: close\r\n\r\n", p, apiHost, e.port, e.placeholder)
		resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
		if err != nil {
			t.Errorf("HTTP/1.1 %s: %v", p, err)
			continue
		}
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 403 || resp.Header.Get("X-Coily-Egress") != "refused" || !strings.Contains(string(body), "path") {
			t.Errorf("HTTP/1.1 %s: %s %q; want 403 saying why", p, resp.Status, body)
		}
	}
	c := e.client(t, caPool(e.ca), true)
	for _, p := range paths { // HTTP/2: net/http sends the path as parsed
		u, err := url.Parse(e.url(apiHost, p))
		if err != nil {
			t.Fatal(err)
		}
		req := &http.Request{Method: "GET", URL: u, Header: http.Header{"Authorization": {"Bearer " + e.placeholder}}}
		resp, err := c.Do(req)
		if err != nil {
			t.Errorf("HTTP/2 %s: %v", p, err)
			continue
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 403 || resp.ProtoMajor != 2 || !strings.Contains(string(body), "path") {
			t.Errorf("HTTP/2 %s: %s %s %q; want 403 saying why", p, resp.Proto, resp.Status, body)
		}
	}
	for _, s := range e.seen.all() {
		if strings.Contains(s, secretTok) {
			t.Errorf("the upstream saw the secret: %q", s)
		}
	}
	var reqs []RequestRow
	waitFor(t, "a request row each", func() bool { reqs, _ = e.tp.Requests(); return len(reqs) >= 2*len(paths) })
	if len(reqs) != 2*len(paths) {
		t.Errorf("%d request rows, want %d", len(reqs), 2*len(paths))
	}
	for _, r := range reqs {
		if r.Decision != Deny || r.Reason != reasonPath || r.Status != 403 || r.Injected {
			t.Errorf("row %+v: want a path refusal", r)
		}
	}
}

// TestInspectInjectPort: an injection for api.example.test (port 443 by
// default) does not send the secret to the same host on another port.
func TestInspectInjectPort(t *testing.T) {
	for _, port := range []int{0, 443, 8443} {
		e := newInspectEnvPort(t, nil, 0, FormBearer, port)
		resp, body := do(t, e.client(t, caPool(e.ca), false), "GET", e.url(apiHost, "/repos/alice/app"), "Bearer "+e.placeholder, "")
		if resp.StatusCode != 403 || !strings.Contains(body, "placeholder") {
			t.Errorf("injection for port %d, request to port %s: %s %q; want 403", port, e.port, resp.Status, body)
		}
		for _, s := range e.seen.all() {
			if strings.Contains(s, secretTok) {
				t.Errorf("port %d: the upstream on %s saw the secret", port, e.port)
			}
		}
	}
}

func mustRule(t *testing.T, s string) HTTPRule {
	t.Helper()
	r, err := ParseHTTPRule(s)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// A host not inspected stays a tunnel: the client sees the upstream's own
// certificate, and one trusting only the exec's CA fails.
func TestInspectOtherHostsStayTunnels(t *testing.T) {
	e := newInspectEnv(t, nil, 0, FormBearer)
	resp, body := do(t, e.client(t, e.upstreamCA.Pool, false), "GET", e.url(tunnelHost, "/x"), "Bearer "+e.placeholder, "")
	if resp.StatusCode != 200 || resp.TLS.PeerCertificates[0].Issuer.CommonName == e.ca.Certificate().Subject.CommonName {
		t.Errorf("tunnel: %s %q issuer %q", resp.Status, body, resp.TLS.PeerCertificates[0].Issuer)
	}
	if _, err := e.client(t, caPool(e.ca), false).Get(e.url(tunnelHost, "/x")); err == nil {
		t.Error("a client trusting only the exec's CA reached a tunnelled host: it was intercepted")
	}
	if reqs, _ := e.tp.Requests(); len(reqs) != 0 {
		t.Errorf("request rows for a tunnel: %+v", reqs)
	}
}

// An inspected CONNECT whose TLS server name is another host is refused.
func TestInspectSNIMismatch(t *testing.T) {
	e := newInspectEnv(t, nil, 0, FormBearer)
	_, _, c := e.tp.raw(t, connect(apiHost+":"+e.port))
	tc := tls.Client(c, &tls.Config{ServerName: otherHost, RootCAs: caPool(e.ca)})
	if err := tc.Handshake(); err == nil {
		t.Fatal("handshake with another server name succeeded")
	}
	waitFor(t, "an sni-mismatch deny row", func() bool {
		r, ok := findRow(e.tp.Rows(), apiHost, Deny)
		return ok && r.Reason == reasonSNIMismatch
	})
}

// Request smuggling: framing that two hops could read differently is
// refused with 400 before anything goes upstream.
func TestInspectSmugglingRefused(t *testing.T) {
	heads := []string{
		"POST /repos/a HTTP/1.1\r\nHost: %s\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /admin HTTP/1.1\r\nHost: %s\r\n\r\n",
		"POST /repos/a HTTP/1.1\r\nHost: %s\r\nTransfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n0\r\n\r\n",
		"POST /repos/a HTTP/1.1\r\nHost: %s\r\nContent-Length: 4\r\nContent-Length: 4\r\n\r\nabcd",
		"POST /repos/a HTTP/1.1\r\nHost: %s\r\nTransfer-Encoding: chunked, identity\r\n\r\n0\r\n\r\n",
		"POST /repos/a HTTP/1.1\r\nHost: %s\r\nTransfer-Encoding : chunked\r\nContent-Length: 4\r\n\r\nabcd",
		"POST /repos/a HTTP/1.1\r\nHost: %s\r\nX: a\r\n Transfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\nabcd",
	}
	e := newInspectEnv(t, nil, 0, FormBearer)
	for _, h := range heads {
		host := apiHost + ":" + e.port
		_, _, c := e.tp.raw(t, connect(host))
		tc := tls.Client(c, &tls.Config{ServerName: apiHost, RootCAs: caPool(e.ca), NextProtos: []string{"http/1.1"}})
		fmt.Fprintf(tc, h, host, host)
		resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
		if err != nil || resp.StatusCode != 400 {
			t.Errorf("%q: %v %v; want 400", h, resp, err)
		}
	}
	if s := e.seen.all(); len(s) != 0 {
		t.Errorf("the upstream received %q", s)
	}
}

// A Host header naming another host than the CONNECT's is refused.
func TestInspectHostMismatch(t *testing.T) {
	e := newInspectEnv(t, nil, 0, FormBearer)
	_, _, c := e.tp.raw(t, connect(apiHost+":"+e.port))
	tc := tls.Client(c, &tls.Config{ServerName: apiHost, RootCAs: caPool(e.ca), NextProtos: []string{"http/1.1"}})
	fmt.Fprintf(tc, "GET /repos/a HTTP/1.1\r\nHost: %s:%s\r\nAuthorization: Bearer %s\r\n\r\n", otherHost, e.port, e.placeholder)
	resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
	if err != nil || resp.StatusCode != 403 {
		t.Fatalf("%v %v; want 403", resp, err)
	}
	if s := e.seen.all(); len(s) != 0 {
		t.Errorf("the upstream received %q", s)
	}
}

// TestInspectPipelinedRequests: two requests sent in one write (HTTP/1.1
// pipelining) are answered in turn, each injected, without the client
// sending anything more: the next head is read from what is buffered.
func TestInspectPipelinedRequests(t *testing.T) {
	e := newInspectEnv(t, nil, 0, FormBearer)
	_, _, c := e.tp.raw(t, connect(apiHost+":"+e.port))
	tc := tls.Client(c, &tls.Config{ServerName: apiHost, RootCAs: caPool(e.ca), NextProtos: []string{"http/1.1"}})
	tc.SetDeadline(time.Now().Add(5 * time.Second))
	req := func(path string) string {
		return fmt.Sprintf("GET %s HTTP/1.1\r\nHost: %s:%s\r\nAuthorization: Bearer %s\r\n\r\n", path, apiHost, e.port, e.placeholder)
	}
	if _, err := io.WriteString(tc, req("/repos/alice/app")+req("/repos/alice/two")); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(tc)
	for _, path := range []string{"/repos/alice/app", "/repos/alice/two"} {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("%s: %v; want its answer without sending more", path, err)
		}
		body, _ := io.ReadAll(resp.Body)
		if want := "auth=secret path=" + path + " body=0"; resp.StatusCode != 200 || string(body) != want {
			t.Errorf("%s: %s %q; want 200 %q", path, resp.Status, body, want)
		}
	}
}

// TestInspectExpectContinueAnyCase: a request that waits for 100
// Continue before its body gets it whatever the case of its Expect
// value, and its body reaches the upstream.
func TestInspectExpectContinueAnyCase(t *testing.T) {
	e := newInspectEnv(t, nil, 0, FormBearer)
	for _, v := range []string{"100-continue", "100-Continue", "100-CONTINUE"} {
		_, _, c := e.tp.raw(t, connect(apiHost+":"+e.port))
		tc := tls.Client(c, &tls.Config{ServerName: apiHost, RootCAs: caPool(e.ca), NextProtos: []string{"http/1.1"}})
		tc.SetDeadline(time.Now().Add(5 * time.Second))
		fmt.Fprintf(tc, "POST /repos/alice/app HTTP/1.1\r\nHost: %s:%s\r\nAuthorization: Bearer %s\r\nExpect: %s\r\nContent-Length: 3\r\n\r\n",
			apiHost, e.port, e.placeholder, v)
		br := bufio.NewReader(tc)
		resp, err := http.ReadResponse(br, nil)
		if err != nil || resp.StatusCode != http.StatusContinue {
			t.Errorf("Expect: %s: %v %v; want 100 Continue before the body is sent", v, resp, err)
			continue
		}
		io.WriteString(tc, "abc")
		resp, err = http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("Expect: %s: %v", v, err)
		}
		body, _ := io.ReadAll(resp.Body)
		if want := "auth=secret path=/repos/alice/app body=3"; resp.StatusCode != 200 || string(body) != want {
			t.Errorf("Expect: %s: %s %q; want 200 %q", v, resp.Status, body, want)
		}
	}
}

// TestInspectSpeaksHTTP1WhenOffered: a client offering h2 and http/1.1
// (gh, curl, git and Go's default) speaks HTTP/1.1 to the proxy, and the
// proxy HTTP/1.1 to an upstream that offers h2; a client offering h2
// alone speaks HTTP/2, and the proxy HTTP/2 to that upstream.
func TestInspectSpeaksHTTP1WhenOffered(t *testing.T) {
	uca := standin.TLS(t)
	var mu sync.Mutex
	var upstream []string
	port := uca.ServeH2(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		upstream = append(upstream, r.Proto)
		mu.Unlock()
		io.WriteString(w, "ok")
	}), apiHost).Port
	ca, err := NewAuthority([]string{apiHost}, time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	tp := startProxy(t, Config{Resolver: newResolver(apiHost, "127.0.0.1"), Inspect: &Inspection{CA: ca, Roots: uca.Pool}},
		[]string{apiHost + ":" + port}, loopback)
	for _, k := range []struct {
		name string
		tr   *http.Transport
		want string
	}{
		{"h2 and http/1.1 offered", &http.Transport{TLSClientConfig: &tls.Config{RootCAs: caPool(ca)}, ForceAttemptHTTP2: true}, "HTTP/1.1"},
		{"h2 alone", h2Only(caPool(ca)), "HTTP/2.0"},
	} {
		resp, body := do(t, tp.client(t, k.tr), "GET", "https://"+apiHost+":"+port+"/", "", "")
		mu.Lock()
		got := upstream
		upstream = nil
		mu.Unlock()
		if resp.StatusCode != 200 || body != "ok" || resp.Proto != k.want {
			t.Errorf("%s: %s %s %q; want 200 over %s", k.name, resp.Proto, resp.Status, body, k.want)
		}
		if len(got) != 1 || got[0] != k.want {
			t.Errorf("%s: the upstream saw %q; want one request over %s", k.name, got, k.want)
		}
	}
}

func TestInspectWithCurl(t *testing.T) {
	curl := lookTool(t, "curl")
	e := newInspectEnv(t, nil, 0, FormBearer)
	for _, proto := range []string{"--http1.1", "--http2"} {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		out, err := execTool(ctx, curl, []string{"PATH=" + os.Getenv("PATH"), "HTTPS_PROXY=http://" + e.tp.tcp, "SSL_CERT_FILE=" + e.caFile},
			"-sS", proto, "-w", " %{http_version}", "--cacert", e.caFile, "-H", "Authorization: Bearer "+e.placeholder,
			e.url(apiHost, "/repos/alice/app"))
		cancel()
		// curl --http2 offers h2 and http/1.1: the proxy picks HTTP/1.1
		// (HTTP/2 alone is TestInspectSpeaksHTTP1WhenOffered's).
		if err != nil || !strings.HasPrefix(out, "auth=secret") || !strings.HasSuffix(out, " 1.1") {
			t.Errorf("curl %s: %v %q; want the secret injected over HTTP/1.1", proto, err, out)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, _ := execTool(ctx, curl, nil, "-sS", "--proxy", "http://"+e.tp.tcp, "--cacert", e.caFile,
		"-H", "Authorization: Bearer "+e.placeholder, e.url(otherHost, "/repos/alice/app"))
	if !strings.Contains(out, "placeholder") {
		t.Errorf("curl with the placeholder to another host: %q; want the refusal", out)
	}
}

// nodeH2 is a node program speaking HTTP/2 alone (ALPN h2, nghttp2)
// through the proxy: CONNECT, TLS trusting the CA file, one GET with an
// Authorization; it prints the status, the body and the ALPN.
const nodeH2 = `
const http = require('http'), tls = require('tls'), http2 = require('http2'), fs = require('fs');
const [proxy, host, port, path, auth, caFile] = process.argv.slice(2);
const fail = e => { console.log('error ' + e); process.exit(1); };
const i = proxy.lastIndexOf(':');
const req = http.request({host: proxy.slice(0, i), port: proxy.slice(i + 1), method: 'CONNECT', path: host + ':' + port});
req.on('error', fail);
req.on('connect', (res, socket) => {
  if (res.statusCode !== 200) fail('CONNECT ' + res.statusCode);
  const s = tls.connect({socket, servername: host, ca: fs.readFileSync(caFile), ALPNProtocols: ['h2']}, () => {
    const c = http2.connect('https://' + host + ':' + port, {createConnection: () => s});
    c.on('error', fail);
    const r = c.request({':path': path, authorization: auth});
    let out = '';
    r.on('response', h => { out += 'status=' + h[':status'] + ' '; });
    r.setEncoding('utf8');
    r.on('data', d => { out += d; });
    r.on('end', () => { console.log(out + ' alpn=' + s.alpnProtocol); c.close(); });
    r.on('error', fail);
  });
  s.on('error', fail);
});
req.end();
`

// TestInspectWithNodeHTTP2: node's HTTP/2 client (nghttp2), offering h2
// alone, gets HTTP/2 from the proxy and the secret injected; its
// placeholder to another host is refused.
func TestInspectWithNodeHTTP2(t *testing.T) {
	node := lookTool(t, "node")
	e := newInspectEnv(t, nil, 0, FormBearer)
	script := filepath.Join(t.TempDir(), "h2.js")
	if err := os.WriteFile(script, []byte(nodeH2), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ host, want string }{
		{apiHost, "status=200 auth=secret path=/repos/alice/app body=0 alpn=h2"},
		{otherHost, "status=403 "},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		out, err := execTool(ctx, node, nil, script, e.tp.tcp, c.host, e.port, "/repos/alice/app", "Bearer "+e.placeholder, e.caFile)
		cancel()
		if err != nil || !strings.HasPrefix(out, c.want) || (c.host == otherHost && !strings.Contains(out, "placeholder")) {
			t.Errorf("node h2 to %s: %v %q; want %q", c.host, err, out, c.want)
		}
	}
}

// gh, given only the placeholder, works against the GitHub stand-in
// through the proxy, which injects the real token.
func TestInspectWithGH(t *testing.T) {
	gh := lookTool(t, "gh")
	ghe := "ghe.example.test"
	g := standin.GitHubEnterprise(t, secretTok, ghe)
	ca, err := NewAuthority([]string{ghe}, time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	ph := NewPlaceholder()
	uca := x509.NewCertPool()
	pemBytes, _ := os.ReadFile(g.CAFile)
	uca.AppendCertsFromPEM(pemBytes)
	insp := &Inspection{CA: ca, Roots: uca, Inject: []Injection{{Placeholder: ph, Secret: secretTok, Host: ghe, Port: atoi(t, g.Port), Form: FormToken}}}
	tp := startProxy(t, Config{Resolver: newResolver(ghe, "127.0.0.1"), Inspect: insp}, []string{ghe + ":" + g.Port}, loopback)
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	os.WriteFile(caFile, ca.CertPEM(), 0o600)
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "GH_HOST=" + ghe + ":" + g.Port, "GH_ENTERPRISE_TOKEN=" + ph,
		"SSL_CERT_FILE=" + caFile, "GH_CONFIG_DIR=" + t.TempDir(), "GH_PROMPT_DISABLED=1", "GH_NO_UPDATE_NOTIFIER=1",
		"NO_COLOR=1", "HTTPS_PROXY=http://" + tp.tcp}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := execTool(ctx, gh, env, "api", "user", "--jq", ".login")
	if err != nil || strings.TrimSpace(out) != g.Login {
		t.Fatalf("gh api user: %v %q; want %q", err, out, g.Login)
	}
	if strings.Contains(out, secretTok) {
		t.Error("gh printed the secret")
	}
	waitFor(t, "an injected request row", func() bool {
		reqs, _ := tp.Requests()
		return len(reqs) > 0 && reqs[len(reqs)-1].Injected
	})
}

func atoi(t *testing.T, s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func b64(s string) string { return base64Std(s) }

// Plain HTTP never carries a placeholder out: in the URL or a header it
// is refused before a byte goes upstream.
func TestPlainHTTPPlaceholderRefused(t *testing.T) {
	e := newInspectEnv(t, nil, 0, FormBearer)
	host := apiHost + ":" + e.port
	for _, head := range []string{
		"GET http://" + host + "/x?t=" + e.placeholder + " HTTP/1.1\r\nHost: " + host + "\r\n\r\n",
		"GET http://" + host + "/x HTTP/1.1\r\nHost: " + host + "\r\nAuthorization: Bearer " + e.placeholder + "\r\n\r\n",
		"GET http://" + host + "/x HTTP/1.1\r\nHost: " + host + "\r\nAuthorization: Basic " + b64("u:"+e.placeholder) + "\r\n\r\n",
	} {
		resp, body, _ := e.tp.raw(t, head)
		if resp.StatusCode != 403 || !strings.Contains(body, "placeholder") {
			t.Errorf("%q: %d %q; want 403", head, resp.StatusCode, body)
		}
	}
	if s := e.seen.all(); len(s) != 0 {
		t.Errorf("the upstream received %q", s)
	}
}
