package standin

import (
	"crypto/subtle"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync"
	"testing"
)

// NpmTLS is a private registry in front of verdaccio: HTTPS, and every
// request needs `Authorization: Bearer <token>`, as npm sends a
// registry's `_authToken`.
type NpmTLS struct {
	*Server
	mu       sync.Mutex
	requests []string
}

// TLS serves n over TLS on 127.0.0.1 (a certificate for hosts too) until
// t's cleanup, to requests bearing token only (401 otherwise), which it
// strips before verdaccio (where everyone may install) sees them.
// Verdaccio writes tarball URLs from the forwarded host and protocol, so
// npm fetches them from this server too.
func (n *Npm) TLS(t testing.TB, token string, hosts ...string) *NpmTLS {
	t.Helper()
	up, err := url.Parse(n.URL)
	if err != nil {
		t.Fatalf("standin: %v", err)
	}
	f := &NpmTLS{}
	rp := &httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) {
		r.SetURL(up)
		r.Out.Host = r.In.Host
		r.SetXForwarded()
	}}
	want := []byte("Bearer " + token)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
			f.record("401 " + r.Method + " " + r.URL.Path)
			w.Header().Set("WWW-Authenticate", `Bearer realm="standin npm"`)
			http.Error(w, "authentication required", http.StatusUnauthorized)
			return
		}
		f.record(r.Method + " " + r.URL.Path)
		r.Header.Del("Authorization")
		rp.ServeHTTP(w, r)
	})
	f.Server = TLS(t).Serve(t, h, hosts...)
	return f
}

// Requests returns one line per request: "GET /standin-pkg" or "401 GET …".
func (f *NpmTLS) Requests() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.requests...)
}

func (f *NpmTLS) record(line string) {
	f.mu.Lock()
	f.requests = append(f.requests, line)
	f.mu.Unlock()
}
