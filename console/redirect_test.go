package console_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"coily.dev/coily/console"
)

// TestRedirector: port 80 sends a browser to the HTTPS console, for the
// node's own names only.
func TestRedirector(t *testing.T) {
	h := console.Redirector("https://coily.example.ts.net/", []string{"coily", "coily.example.ts.net", "100.64.0.1"})
	for _, tc := range []struct {
		host, path string
		status     int
		location   string
	}{
		{"coily", "/approvals/abc", http.StatusMovedPermanently, "https://coily.example.ts.net/approvals/abc"},
		{"100.64.0.1:80", "/", http.StatusMovedPermanently, "https://coily.example.ts.net/"},
		{"COILY.example.ts.net.", "//evil.example/x", http.StatusMovedPermanently, "https://coily.example.ts.net//evil.example/x"},
		{"attacker.example", "/", http.StatusMisdirectedRequest, ""},
	} {
		r := httptest.NewRequest("GET", tc.path, nil)
		r.Host = tc.host
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != tc.status || w.Header().Get("Location") != tc.location {
			t.Errorf("%s%s: %d %q, want %d %q", tc.host, tc.path, w.Code, w.Header().Get("Location"), tc.status, tc.location)
		}
		if w.Header().Get("X-Frame-Options") != "DENY" {
			t.Errorf("%s: no security headers", tc.host)
		}
	}
}
