package console_test

import (
	"io"
	"strings"
	"sync/atomic"
	"testing"

	"coily.dev/coily/audit"
)

// spyBody is a request body that says whether anything read it.
type spyBody struct{ read atomic.Bool }

func (b *spyBody) Read([]byte) (int, error) {
	b.read.Store(true)
	return 0, io.EOF
}

// routes are the console's routes, with a method each (and others'
// methods on them, and paths that are none).
var routes = []struct{ method, path string }{
	{"GET", "/"}, {"GET", "/approvals/x"}, {"GET", "/audit"}, {"GET", "/static/common.js"}, {"GET", "/nope"}, {"POST", "/"},
	{"GET", "/api/whoami"}, {"GET", "/api/status"}, {"GET", "/api/approvals"}, {"GET", "/api/approvals/stream"},
	{"POST", "/api/approvals/x/approve"}, {"POST", "/api/approvals/x/deny"}, {"POST", "/api/lockout"},
	{"POST", "/api/pause"}, {"POST", "/api/resume"}, {"POST", "/api/execs/x/kill"}, {"GET", "/api/audit/stream"},
	{"PUT", "/api/lockout"}, {"GET", "/api/pause"}, {"POST", "/api/nope"},
}

// TestRefusedBodyNeverRead: on every route, a caller who cannot be
// identified, or holds no permission for it, is refused (audited) before
// anything of its body is read, and its connection is not kept; so is
// a request the guard refuses. An admitted caller's body is read.
func TestRefusedBodyNeverRead(t *testing.T) {
	f := start(t)
	for _, rt := range routes {
		for _, remote := range []string{unknown, stranger} {
			body := &spyBody{}
			w := f.do(t, remote, rt.method, rt.path, body, map[string]string{"Content-Type": "application/json"})
			if w.Code != 401 && w.Code != 403 {
				t.Errorf("%s %s from %s: %d, want a refusal", rt.method, rt.path, remote, w.Code)
			}
			if body.read.Load() {
				t.Errorf("%s %s from %s: the body was read before the caller was admitted", rt.method, rt.path, remote)
			}
			if w.Header().Get("Connection") != "close" {
				t.Errorf("%s %s from %s: the connection is kept after a refusal", rt.method, rt.path, remote)
			}
		}
	}
	for _, p := range []string{"/api/approvals/x/approve", "/api/lockout", "/api/execs/x/kill"} {
		body := &spyBody{}
		if w := f.do(t, watcher, "POST", p, body, nil); w.Code != 403 || body.read.Load() {
			t.Errorf("POST %s from a watcher: %d, body read %v", p, w.Code, body.read.Load())
		}
	}
	for _, hdr := range []map[string]string{{"Host": "attacker.example"}, {"Origin": "http://attacker.example"}} {
		body := &spyBody{}
		if w := f.do(t, owner, "POST", "/api/lockout", body, hdr); w.Code < 400 || body.read.Load() {
			t.Errorf("guard refusal %v: %d, body read %v", hdr, w.Code, body.read.Load())
		}
	}
	f.in.WaitAudit(t, func(r audit.Record) bool {
		return r.Principal == "tag:stranger" && r.Decision == "refuse" && strings.HasSuffix(r.Method, "/Lockout")
	})
	body := &spyBody{}
	if w := f.do(t, owner, "POST", "/api/pause", body, nil); w.Code != 200 || !body.read.Load() {
		t.Errorf("owner's pause: %d, body read %v", w.Code, body.read.Load())
	}
}

// TestBodyRules: a body on a request that takes none, or over the bound,
// is refused without being read, even from an admitted caller.
func TestBodyRules(t *testing.T) {
	f := start(t)
	for _, tc := range []struct {
		method, path string
		body         io.Reader
		status       int
	}{
		{"GET", "/api/status", strings.NewReader("x"), 400},
		{"GET", "/", strings.NewReader("x"), 400},
		{"POST", "/api/pause", strings.NewReader(`{"reason":"` + strings.Repeat("a", 5000) + `"}`), 400},
		{"POST", "/api/pause", io.MultiReader(strings.NewReader(`{"reason":"`), strings.NewReader(strings.Repeat("a", 5000)+`"}`)), 400},
	} {
		w := f.do(t, owner, tc.method, tc.path, tc.body, map[string]string{"Content-Type": "application/json"})
		if w.Code != tc.status || !strings.Contains(w.Body.String(), "bad-request") {
			t.Errorf("%s %s with a body: %d %s", tc.method, tc.path, w.Code, w.Body)
		}
	}
}
