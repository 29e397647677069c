package egress

import (
	"bufio"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
)

// TestInspectSecondTLSHop: a placeholder sent over a second hop never
// carries the secret. A CONNECT inside an inspected stream is refused
// (only origin-form requests go through one), so is a TLS handshake
// started inside it (it is not a request head), with nothing sent
// upstream; TLS to an allowed host that is not inspected is a tunnel the
// proxy cannot read, so the placeholder arrives there as the placeholder.
func TestInspectSecondTLSHop(t *testing.T) {
	e := newInspectEnv(t, nil, 0, FormBearer)
	api := apiHost + ":" + e.port
	inner := func(t *testing.T) *tls.Conn {
		_, _, c := e.tp.raw(t, connect(api))
		tc := tls.Client(c, &tls.Config{ServerName: apiHost, RootCAs: caPool(e.ca), NextProtos: []string{"http/1.1"}})
		if err := tc.Handshake(); err != nil {
			t.Fatal(err)
		}
		return tc
	}
	for _, target := range []string{tunnelHost + ":" + e.port, api} {
		tc := inner(t)
		fmt.Fprintf(tc, "CONNECT %s HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nProxy-Authorization: Bearer %s\r\n\r\n", target, target, e.placeholder, e.placeholder)
		resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
		if err != nil || (resp.StatusCode != 400 && resp.StatusCode != 403) {
			t.Errorf("CONNECT %s inside an inspected stream: %v %v; want it refused", target, resp, err)
		}
	}
	// A ClientHello where a request head should be.
	tc := inner(t)
	hop := tls.Client(tc, &tls.Config{ServerName: tunnelHost, RootCAs: e.upstreamCA.Pool})
	// The proxy answers the ClientHello with a 400 at once and closes
	// (the client reads the answer as a record that is not TLS, or finds
	// the connection closed), rather than waiting for a request head that
	// never ends: the client's deadline is not what ends it.
	err := hop.Handshake()
	var ne net.Error
	if err == nil || (errors.As(err, &ne) && ne.Timeout()) {
		t.Errorf("a TLS handshake inside an inspected stream: %v; want it refused at once", err)
	}
	waitFor(t, "a bad-request row", func() bool {
		reqs, _ := e.tp.Requests()
		return slices.ContainsFunc(reqs, func(r RequestRow) bool { return r.Reason == reasonBadRequest && r.Status == 400 })
	})
	if s := e.seen.all(); len(s) != 0 {
		t.Errorf("the upstream received %q", s)
	}
	// TLS to an allowed host that is not inspected: the placeholder stays one.
	resp, _ := do(t, e.client(t, e.upstreamCA.Pool, false), "GET", e.url(tunnelHost, "/x"), "Bearer "+e.placeholder, "")
	seen := e.seen.all()
	if resp.StatusCode != 200 || len(seen) != 1 || !strings.Contains(seen[0], e.placeholder) || strings.Contains(seen[0], secretTok) {
		t.Errorf("through a tunnel: %s, the upstream saw %q; want the placeholder, not the secret", resp.Status, seen)
	}
}

func TestMethodStart(t *testing.T) {
	for in, want := range map[string]bool{
		"": true, "G": true, "GET": true, "GET ": true, "PROPFIND /": true, "M-SEARCH *": true,
		"\x16\x03\x01": false, " GET": false, "GET\r\n": false, "\r\nGET /": false, "GE\x00T": false, "GÉT ": false,
	} {
		if got := methodStart([]byte(in)); got != want {
			t.Errorf("methodStart(%q) = %v, want %v", in, got, want)
		}
	}
}
