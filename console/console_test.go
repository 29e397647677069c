package console_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"coily.dev/coily/audit"
	"coily.dev/coily/console"
	"coily.dev/coily/internal/testserver"
	coilyv1 "coily.dev/coily/proto/coily/v1"
	"coily.dev/coily/webapi"
)

// TestSecurityHeadersEverywhere: pages, files, answers and refusals all
// carry the headers, and nothing ever sets a cookie.
func TestSecurityHeadersEverywhere(t *testing.T) {
	f := start(t)
	cases := []struct {
		remote, method, path string
		hdr                  map[string]string
		status               int
	}{
		{owner, "GET", "/", nil, 200},
		{owner, "GET", "/approvals/x", nil, 200},
		{owner, "GET", "/audit", nil, 200},
		{owner, "GET", "/static/app.js", nil, 404},
		{owner, "GET", "/static/common.js", nil, 200},
		{owner, "GET", "/static/app.css", nil, 200},
		{owner, "GET", "/nope", nil, 404},
		{owner, "GET", "/api/status", nil, 200},
		{owner, "GET", "/api/nope", nil, 404},
		{owner, "PUT", "/api/lockout", nil, 405},
		{stranger, "GET", "/", nil, 403},
		{unknown, "GET", "/api/status", nil, 401},
		{owner, "GET", "/", map[string]string{"Host": "evil.example"}, 421},
		{owner, "POST", "/api/pause", map[string]string{"Sec-Fetch-Site": "cross-site"}, 403},
	}
	for _, tc := range cases {
		w := f.do(t, tc.remote, tc.method, tc.path, nil, tc.hdr)
		if w.Code != tc.status {
			t.Errorf("%s %s from %s: %d, want %d (%s)", tc.method, tc.path, tc.remote, w.Code, tc.status, w.Body)
		}
		h := w.Header()
		for k, want := range map[string]string{"X-Frame-Options": "DENY", "Referrer-Policy": "no-referrer",
			"X-Content-Type-Options": "nosniff", "Cache-Control": "no-store"} {
			if h.Get(k) != want {
				t.Errorf("%s %s: %s = %q, want %q", tc.method, tc.path, k, h.Get(k), want)
			}
		}
		csp := h.Get("Content-Security-Policy")
		for _, d := range []string{"script-src 'self'", "frame-ancestors 'none'", "default-src 'none'", "require-trusted-types-for 'script'"} {
			if !strings.Contains(csp, d) {
				t.Errorf("%s %s: CSP %q lacks %q", tc.method, tc.path, csp, d)
			}
		}
		if strings.Contains(csp, "unsafe") {
			t.Errorf("CSP allows something unsafe: %q", csp)
		}
		if len(w.Result().Cookies()) > 0 || h.Get("Set-Cookie") != "" {
			t.Errorf("%s %s sets a cookie", tc.method, tc.path)
		}
	}
}

// TestPagesHaveNoInlineScript: every page loads its script from a file,
// so the CSP needs no 'unsafe-inline' and no nonce.
func TestPagesHaveNoInlineScript(t *testing.T) {
	f := start(t)
	inline := regexp.MustCompile(`(?i)<script(\s[^>]*)?>\s*[^<\s]|\son[a-z]+\s*=|javascript:|<style`)
	for _, p := range []string{"/", "/approvals/abc", "/audit"} {
		w := f.do(t, owner, "GET", p, nil, nil)
		body := w.Body.String()
		if !strings.HasPrefix(w.Header().Get("Content-Type"), "text/html") || !strings.Contains(body, `<script src="/static/common.js" defer></script>`) {
			t.Fatalf("%s: %s %q", p, w.Header().Get("Content-Type"), body)
		}
		if m := inline.FindString(body); m != "" {
			t.Errorf("%s has inline script or style: %q", p, m)
		}
	}
	for _, js := range []string{"common.js", "index.js", "approval.js", "audit.js"} {
		body := f.do(t, owner, "GET", "/static/"+js, nil, nil).Body.String()
		if strings.Contains(body, "innerHTML") || strings.Contains(body, "insertAdjacentHTML") || strings.Contains(body, "eval(") {
			t.Errorf("%s builds markup from strings", js)
		}
	}
}

// TestGuardRefusesOtherHostsAndOrigins: DNS rebinding and cross-origin
// requests are refused before anything happens, and audited.
func TestGuardRefusesOtherHostsAndOrigins(t *testing.T) {
	f := start(t)
	for _, tc := range []struct {
		name string
		hdr  map[string]string
		want int
	}{
		{"rebound host", map[string]string{"Host": "attacker.example"}, http.StatusMisdirectedRequest},
		{"rebound host with the right port", map[string]string{"Host": "attacker.example:80"}, http.StatusMisdirectedRequest},
		{"cross-site fetch metadata", map[string]string{"Sec-Fetch-Site": "cross-site"}, http.StatusForbidden},
		{"same-site other origin", map[string]string{"Sec-Fetch-Site": "same-site"}, http.StatusForbidden},
		{"origin of another host", map[string]string{"Origin": "http://attacker.example"}, http.StatusForbidden},
		{"null origin", map[string]string{"Origin": "null"}, http.StatusForbidden},
	} {
		w := f.do(t, owner, "POST", "/api/lockout", nil, tc.hdr)
		if w.Code != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, w.Code, tc.want)
		}
		if a := answer(t, w); a.OK || a.Error.Code != "permission-denied" || a.Error.AuditID == "" {
			t.Errorf("%s: answer %+v", tc.name, a)
		}
	}
	st, err := f.in.Client.API.Status(context.Background(), &coilyv1.StatusRequest{})
	if err != nil || st.GetLockout().GetActive() {
		t.Fatalf("a refused request locked out: %v %v", st, err)
	}
	rec := f.in.WaitAudit(t, func(r audit.Record) bool { return r.Method == "web:guard" && strings.Contains(r.Reason, "host") })
	if rec.Principal != "tag:owner" || rec.Decision != "refuse" || rec.Transport != "web" {
		t.Errorf("guard refusal audited as %+v", rec)
	}
	// Cross-site reads of the API are refused too; pages may be opened
	// from a link (a notification).
	if w := f.do(t, owner, "GET", "/api/status", nil, map[string]string{"Sec-Fetch-Site": "cross-site"}); w.Code != 403 {
		t.Errorf("cross-site API read: %d", w.Code)
	}
	if w := f.do(t, owner, "GET", "/approvals/x", nil, map[string]string{"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "navigate"}); w.Code != 200 {
		t.Errorf("page opened from a link: %d", w.Code)
	}
	// Same origin, by fetch metadata or by Origin, and a bare POST (a
	// program: ntfy's http action) are served.
	for _, hdr := range []map[string]string{{"Sec-Fetch-Site": "same-origin"}, {"Origin": "http://coily"}, nil} {
		if w := f.do(t, owner, "POST", "/api/pause", nil, hdr); w.Code != 200 {
			t.Errorf("same-origin pause %v: %d %s", hdr, w.Code, w.Body)
		}
	}
}

// TestAPIPermissions: what each caller may do through the API, with the
// refusal codes and HTTP statuses.
func TestAPIPermissions(t *testing.T) {
	f := start(t)
	for _, tc := range []struct {
		remote, method, path string
		status               int
		code                 string
	}{
		{watcher, "GET", "/api/status", 200, ""},
		{watcher, "GET", "/api/whoami", 200, ""},
		{stranger, "GET", "/api/whoami", 403, "permission-denied"},
		{watcher, "GET", "/api/approvals", 403, "permission-denied"},
		{watcher, "POST", "/api/approvals/x/approve", 403, "permission-denied"},
		{watcher, "POST", "/api/lockout", 403, "permission-denied"},
		{watcher, "POST", "/api/resume", 403, "permission-denied"},
		{watcher, "POST", "/api/execs/x/kill", 403, "permission-denied"},
		{watcher, "GET", "/api/audit/stream", 403, "permission-denied"},
		{watcher, "GET", "/api/approvals/stream", 403, "permission-denied"},
		{stranger, "GET", "/api/status", 403, "permission-denied"},
		{stranger, "POST", "/api/pause", 403, "permission-denied"},
		{unknown, "POST", "/api/lockout", 401, "unauthenticated"},
		{owner, "GET", "/api/approvals", 200, ""},
		{owner, "POST", "/api/approvals/nope/approve", 400, "bad-request"},
		{owner, "POST", "/api/approvals/nope/deny", 400, "bad-request"},
		{owner, "POST", "/api/execs/nope/kill", 400, "bad-request"},
		{owner, "GET", "/api/audit/stream?color=red", 400, "bad-request"},
		{stranger, "GET", "/api/audit/stream?color=red", 403, "permission-denied"},
	} {
		w := f.do(t, tc.remote, tc.method, tc.path, nil, nil)
		a := answer(t, w)
		if w.Code != tc.status || a.OK != (tc.code == "") || a.Error.Code != tc.code {
			t.Errorf("%s %s from %s: %d %+v, want %d %q", tc.method, tc.path, tc.remote, w.Code, a, tc.status, tc.code)
		}
	}
}

// TestStatusShowsCallerAndExecs: the status page's data.
func TestStatusShowsCallerAndExecs(t *testing.T) {
	f := start(t)
	done := make(chan error, 1)
	go func() {
		_, err := f.in.Client.Exec(context.Background(), &coilyv1.ExecRequest{Argv: []string{"/bin/sh", "-c", "sleep 30", "\x1b[31mred\u202e"}}, io.Discard, io.Discard)
		done <- err
	}()
	var st struct {
		apiAnswer
		Caller struct {
			Principal   string   `json:"principal"`
			Permissions []string `json:"permissions"`
		} `json:"caller"`
		ExecsShown bool `json:"execs_shown"`
		Execs      []struct {
			RequestID string `json:"request_id"`
			ArgvText  string `json:"argv_text"`
			Running   bool   `json:"running"`
		} `json:"execs"`
	}
	testserver.Poll(t, 10*time.Second, "the exec running", func() bool {
		decode(t, f.do(t, owner, "GET", "/api/status", nil, nil), &st)
		return len(st.Execs) == 1 && st.Execs[0].Running
	})
	if st.Caller.Principal != "tag:owner" || !st.ExecsShown || !strings.Contains(strings.Join(st.Caller.Permissions, ","), "audit-read") {
		t.Fatalf("status: %+v", st)
	}
	if want := `/bin/sh -c 'sleep 30' $'\x1b[31mred\u202e'`; st.Execs[0].ArgvText != want {
		t.Errorf("argv_text %s, want %s", st.Execs[0].ArgvText, want)
	}
	w := f.do(t, owner, "POST", "/api/execs/"+st.Execs[0].RequestID+"/kill", strings.NewReader(`{"reason":"stuck"}`),
		map[string]string{"Content-Type": "application/json"})
	if w.Code != 200 {
		t.Fatalf("kill: %d %s", w.Code, w.Body)
	}
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "command-killed") {
			t.Fatalf("killed exec answered %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("killed exec did not end")
	}
}

// A caller allowed only to exec pauses itself from the console, not the
// server; the owner sees that pause and lifts it with Resume.
func TestSelfPauseInTheConsole(t *testing.T) {
	f := start(t)
	type stop struct {
		Active    bool   `json:"active"`
		Principal string `json:"principal"`
	}
	var paused struct {
		apiAnswer
		Pause stop `json:"pause"`
	}
	decode(t, f.do(t, agent, "POST", "/api/pause", strings.NewReader(`{"reason":"stop me"}`), map[string]string{"Content-Type": "application/json"}), &paused)
	if !paused.Pause.Active || paused.Pause.Principal != "tag:agent" {
		t.Fatalf("pause from an exec-only caller: %+v", paused)
	}
	var st struct {
		apiAnswer
		Pause      stop   `json:"pause"`
		SelfPauses []stop `json:"self_pauses"`
	}
	decode(t, f.do(t, owner, "GET", "/api/status", nil, nil), &st)
	if st.Pause.Active || len(st.SelfPauses) != 1 || st.SelfPauses[0].Principal != "tag:agent" {
		t.Fatalf("owner's status: %+v", st)
	}
	if w := f.do(t, owner, "POST", "/api/resume", nil, nil); w.Code != 200 {
		t.Fatalf("resume: %d %s", w.Code, w.Body)
	}
	decode(t, f.do(t, owner, "GET", "/api/status", nil, nil), &st)
	if len(st.SelfPauses) != 0 {
		t.Fatalf("after resume: %+v", st)
	}
}

// hostileArgs are what an agent may put before an approver.
var hostileArgs = []string{
	`<img src=x onerror=alert(1)>`, `</pre><script>alert(2)</script>`, "\x1b]8;;https://evil.example/\x1b\\click\x1b]8;;\x1b\\",
	"rm -rf /\rls -l", "evil\u202egnp.exe", "x\ncoily: approved", "\u2066hidden\u2069", "ok\U000e0041", "\x7fdel\u0085",
}

// TestHostileArgvIsVisibleText: every text field of the API is visible
// text; argv_text reads back as the argv.
func TestHostileArgvIsVisibleText(t *testing.T) {
	f := start(t)
	done := make(chan error, 1)
	argv := append([]string{"/usr/bin/printf", "%s\n"}, hostileArgs...)
	go func() {
		_, err := f.in.Client.Exec(context.Background(), &coilyv1.ExecRequest{Argv: argv, Note: "please \u202eevol",
			Stdin: []byte("kind: Secret\n\x1b]0;owned\x07<img src=x>\n")}, io.Discard, io.Discard)
		done <- err
	}()
	var body string
	testserver.Poll(t, 10*time.Second, "the approval", func() bool {
		w := f.do(t, owner, "GET", "/api/approvals", nil, nil)
		body = w.Body.String()
		return strings.Contains(body, `"argv_text"`)
	})
	var list struct {
		Approvals []map[string]any `json:"approvals"`
	}
	if err := json.Unmarshal([]byte(body), &list); err != nil || len(list.Approvals) != 1 {
		t.Fatalf("approvals %s: %v", body, err)
	}
	a := list.Approvals[0]
	for k, v := range a {
		if s, ok := v.(string); ok && k != "stdin_head" {
			checkVisible(t, k, s)
		}
	}
	// Standard input: its size, digest and head, line breaks kept and
	// every other control character escaped.
	if a["stdin_bytes"] != float64(35) || len(a["stdin_sha256"].(string)) != 64 {
		t.Errorf("stdin shown as %v bytes, sha256 %v", a["stdin_bytes"], a["stdin_sha256"])
	}
	head, _ := a["stdin_head"].(string)
	for _, line := range strings.Split(head, "\n") {
		checkVisible(t, "stdin_head line", line)
	}
	if head != "kind: Secret\n\\x1b]0;owned\\a<img src=x>\n" {
		t.Errorf("stdin_head %q", head)
	}
	text := a["argv_text"].(string)
	for _, want := range []string{`'<img src=x onerror=alert(1)>'`, `$'evil\u202egnp.exe'`, `$'x\ncoily: approved'`, `$'\x7fdel\u0085'`} {
		if !strings.Contains(text, want) {
			t.Errorf("argv_text %s lacks %s", text, want)
		}
	}
	if a["request_note"] != `please \u202eevol` {
		t.Errorf("note shown as %q", a["request_note"])
	}
	id := a["id"].(string)
	if w := f.do(t, owner, "POST", "/api/approvals/"+id+"/deny", nil, nil); w.Code != 200 {
		t.Fatalf("deny: %d %s", w.Code, w.Body)
	}
	if err := <-done; err == nil || !strings.Contains(err.Error(), "confirm-rejected") {
		t.Fatalf("denied exec answered %v", err)
	}
}

// checkVisible fails unless s holds graphic runes only.
func checkVisible(t *testing.T, field, s string) {
	t.Helper()
	if !utf8.ValidString(s) {
		t.Errorf("%s %q is not valid UTF-8", field, s)
	}
	for _, r := range s {
		if !unicode.IsGraphic(r) {
			t.Errorf("%s %q carries %U", field, s, r)
		}
	}
}

// TestDecideBodies: a bare POST (ntfy), a JSON note, and hostile bodies.
func TestDecideBodies(t *testing.T) {
	f := start(t)
	for _, tc := range []struct {
		name, ct, body string
		ok             bool
	}{
		{"bare", "", "", true},
		{"json note", "application/json", `{"note":"fine"}`, true},
		{"json charset", "application/json; charset=utf-8", `{}`, true},
		{"form post", "application/x-www-form-urlencoded", "note=x", false},
		{"text plain", "text/plain", `{"note":"x"}`, false},
		{"unknown field", "application/json", `{"note":"x","verdict":"approve"}`, false},
		{"two objects", "application/json", `{"note":"x"}{"note":"y"}`, false},
		{"note not a string", "application/json", `{"note":1}`, false},
		{"note with a control", "application/json", `{"note":"a\u001b[2Jb"}`, true},
		{"note with a NUL", "application/json", `{"note":"a\u0000b"}`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			done := make(chan error, 1)
			go func() {
				_, err := f.in.Client.Exec(context.Background(), &coilyv1.ExecRequest{Argv: []string{"/bin/echo", "confirm", tc.name}}, io.Discard, io.Discard)
				done <- err
			}()
			var id string
			testserver.Poll(t, 10*time.Second, "approval", func() bool {
				var l struct {
					Approvals []struct {
						ID       string `json:"id"`
						ArgvText string `json:"argv_text"`
					} `json:"approvals"`
				}
				decode(t, f.do(t, owner, "GET", "/api/approvals", nil, nil), &l)
				for _, a := range l.Approvals {
					if strings.Contains(a.ArgvText, tc.name) || strings.Contains(a.ArgvText, "'"+tc.name+"'") {
						id = a.ID
					}
				}
				return id != ""
			})
			hdr := map[string]string{}
			if tc.ct != "" {
				hdr["Content-Type"] = tc.ct
			}
			w := f.do(t, owner, "POST", "/api/approvals/"+id+"/approve", strings.NewReader(tc.body), hdr)
			if a := answer(t, w); a.OK != tc.ok || (!tc.ok && (w.Code != 400 || a.Error.Code != "bad-request")) {
				t.Fatalf("%d %+v", w.Code, a)
			}
			if !tc.ok {
				f.do(t, owner, "POST", "/api/approvals/"+id+"/deny", nil, nil)
			}
			err := <-done
			if tc.ok != (err == nil) {
				t.Fatalf("exec after decision: %v", err)
			}
		})
	}
}

// TestAuditStream: the backlog, "ready", then live records that pass the
// filter; the console's close ends the stream.
func TestAuditStream(t *testing.T) {
	f := start(t)
	if _, err := f.in.Client.API.Pause(context.Background(), &coilyv1.PauseRequest{Reason: "before the stream"}); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(remoteAs(owner, f.c))
	defer srv.Close()
	req, _ := http.NewRequest("GET", srv.URL+"/api/audit/stream?event=pause", nil)
	req.Host = "coily"
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("stream: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	events := readEvents(resp.Body)
	next := func(name string) sseEvent {
		t.Helper()
		for {
			select {
			case ev, ok := <-events:
				if !ok {
					t.Fatalf("stream ended waiting for %s", name)
				}
				if ev.name == name {
					return ev
				}
				if ev.name == "record" && !strings.Contains(ev.data, `"event":"pause"`) {
					t.Fatalf("filtered stream sent %s", ev.data)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("no %s event", name)
			}
		}
	}
	first := next("record")
	if !strings.Contains(first.data, "before the stream") || first.id == "" {
		t.Fatalf("backlog record: %+v", first)
	}
	next("ready")
	if _, err := f.in.Client.API.Resume(context.Background(), &coilyv1.ResumeRequest{Reason: "not a pause"}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.in.Client.API.Pause(context.Background(), &coilyv1.PauseRequest{Reason: "during the stream"}); err != nil {
		t.Fatal(err)
	}
	live := next("record")
	if !strings.Contains(live.data, "during the stream") || live.id <= first.id {
		t.Fatalf("live record: %+v", live)
	}
	f.c.Close()
	for range events { // the console's close ends the stream
	}
}

// TestAuditStreamRevoked: a caller whose grant goes away is cut off at
// the next heartbeat.
func TestAuditStreamRevoked(t *testing.T) {
	f := start(t)
	srv := httptest.NewServer(remoteAs(owner, f.c))
	defer srv.Close()
	req, _ := http.NewRequest("GET", srv.URL+"/api/audit/stream", nil)
	req.Host = "coily"
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	events := readEvents(resp.Body)
	if err := writePolicy(f, strings.Replace(testserver.WebPolicy, "approve, audit-read]", "approve]", 1)); err != nil {
		t.Fatal(err)
	}
	deadline := time.After(10 * time.Second)
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				t.Fatal("stream ended without saying why")
			}
			if ev.name == "refused" {
				if !strings.Contains(ev.data, "permission-denied") {
					t.Fatalf("refused: %s", ev.data)
				}
				for range events {
				}
				return
			}
		case <-deadline:
			t.Fatal("the stream outlived the grant")
		}
	}
}

func writePolicy(f *fixture, p string) error {
	if err := writeFile(f.in.PolicyPath, p); err != nil {
		return err
	}
	return f.in.Server.ReloadPolicy(context.Background(), f.in.PolicyPath)
}

// TestStreamOpensAtOnce: a stream's headers (and its retry line) reach
// the client before any event, though none is due for an hour.
func TestStreamOpensAtOnce(t *testing.T) {
	f := start(t)
	c, err := console.New(console.Config{Server: f.in.Server, Hosts: []string{"coily"}, Heartbeat: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	srv := httptest.NewServer(remoteAs(owner, c))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/api/approvals/stream", nil)
	req.Host = "coily"
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatalf("the stream's headers did not arrive before its first event: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("stream: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	const first = "retry: 1000\n\n"
	buf := make([]byte, len(first))
	if _, err := io.ReadFull(resp.Body, buf); err != nil || string(buf) != first {
		t.Fatalf("first bytes %q, %v; want %q", buf, err, first)
	}
}

// TestServedDuringLockout: what the console still serves while the server
// is locked out (docs/api.md), and what it refuses lockout-active.
func TestServedDuringLockout(t *testing.T) {
	f := start(t)
	if _, err := f.in.Client.API.Lockout(context.Background(), &coilyv1.LockoutRequest{Reason: "test"}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		method, path string
		status       int
		code         string
	}{
		{"GET", "/", 200, ""},
		{"GET", "/audit", 200, ""},
		{"GET", "/api/whoami", 200, ""},
		{"GET", "/api/status", 200, ""},
		{"POST", "/api/lockout", 200, ""},
		{"POST", "/api/execs/nope/kill", 400, "bad-request"}, // served: no such command
		{"GET", "/api/approvals", 409, "lockout-active"},
		{"GET", "/api/approvals/stream", 409, "lockout-active"},
		{"POST", "/api/approvals/nope/approve", 409, "lockout-active"},
		{"POST", "/api/pause", 409, "lockout-active"},
		{"POST", "/api/resume", 409, "lockout-active"},
	} {
		w := f.do(t, owner, tc.method, tc.path, nil, nil)
		if w.Code != tc.status {
			t.Errorf("%s %s while locked out: %d, want %d\n%s", tc.method, tc.path, w.Code, tc.status, w.Body)
			continue
		}
		if tc.code != "" {
			if a := answer(t, w); a.Error.Code != tc.code {
				t.Errorf("%s %s while locked out: %+v, want %s", tc.method, tc.path, a, tc.code)
			}
		}
	}
}

// A path the mux would clean answers no redirect of its own before any
// route admits the caller: it is refused by the guard, audited, and its
// body left unread.
func TestGuardRefusesUncleanPaths(t *testing.T) {
	f := start(t)
	for _, p := range []string{"//api/lockout", "/api/./lockout", "/x/../api/lockout", "/api//lockout", "/api/lockout/.."} {
		r := httptest.NewRequest("POST", "http://coily"+p, strings.NewReader(`{"reason":"x"}`))
		r.URL.Path = p // httptest cleans nothing, but say it
		r.RemoteAddr, r.Host = stranger, "coily"
		r.Header.Set("Content-Type", "application/json")
		w := httptest.NewRecorder()
		f.c.ServeHTTP(w, r)
		if w.Code != http.StatusBadRequest || w.Header().Get("Location") != "" {
			t.Errorf("%s: %d (Location %q), want 400 and no redirect", p, w.Code, w.Header().Get("Location"))
		}
	}
	f.in.WaitAudit(t, func(r audit.Record) bool { return r.Method == "web:guard" && strings.Contains(r.Reason, "not clean") })
	if st, _ := f.in.Client.API.Status(context.Background(), &coilyv1.StatusRequest{}); st.GetLockout().GetActive() {
		t.Fatal("an unclean path locked out")
	}
}

// droppedFeed is a fleet's feed whose backlog left older records out.
type droppedFeed struct{}

func (droppedFeed) Subscribe(ctx context.Context, _ int) (*webapi.AuditStream, error) {
	live := make(chan audit.Record)
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		<-ctx.Done()
		close(live)
	}()
	return &webapi.AuditStream{Backlog: []audit.Record{{Seq: 9, Host: "h1", Event: "pause"}}, Dropped: 7, Live: live, Close: cancel, Fleet: true}, nil
}

// TestAuditStreamSaysDropped: a fleet's backlog bounded in size (older
// records left out) says how many in its "ready" event, which the page
// shows.
func TestAuditStreamSaysDropped(t *testing.T) {
	in := testserver.Start(t, testserver.WebOptions())
	c, err := console.New(console.Config{Server: webapi.WithAuditFeed(in.Server, droppedFeed{}), Hosts: []string{"coily"}, Heartbeat: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	srv := httptest.NewServer(remoteAs(owner, c))
	defer srv.Close()
	req, _ := http.NewRequest("GET", srv.URL+"/api/audit/stream", nil)
	req.Host = "coily"
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	for ev := range readEvents(resp.Body) {
		if ev.name != "ready" {
			continue
		}
		if !strings.Contains(ev.data, `"dropped":7`) {
			t.Fatalf("ready: %s, want the 7 records left out", ev.data)
		}
		return
	}
	t.Fatal("the stream ended before ready")
}
