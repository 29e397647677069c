package console_test

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"coily.dev/coily/console"
	"coily.dev/coily/internal/testserver"
)

// consolePolicy gives tailnet tags the console's roles; the local
// operator runs the commands.
const consolePolicy = `version: 1
limits: {concurrency: 4}
roles:
  operator:
    permissions: [exec, lockout, unlock, pause, resume, status, approve]
    commands: ["*"]
  owner:
    permissions: [lockout, pause, resume, status, approve, audit-read]
  watcher:
    permissions: [status]
  agent:
    permissions: [exec]
    commands: [echo]
grants:
  - {principals: ["tag:owner"], roles: [owner]}
  - {principals: ["tag:watch"], roles: [watcher]}
  - {principals: ["tag:agent"], roles: [agent]}
commands:
  - {name: confirm-echo, binary: /bin/echo, args: [confirm, "**"], sandbox: native, confirm: true, confirm_timeout: 5m}
  - {name: confirm-printf, binary: /usr/bin/printf, args: ["**"], flags: any, sandbox: native, confirm: true, confirm_timeout: 5m}
  - {name: echo, binary: /bin/echo, args: ["**"], flags: any, sandbox: native}
  - {name: sh, binary: /bin/sh, args: ["**"], flags: any, sandbox: native, timeout: 5m}
`

// Callers of the fake tailnet (testserver.WhoIsTags), by remote address.
const (
	owner    = "100.64.0.1:40001"
	watcher  = "100.64.0.2:40002"
	stranger = "100.64.0.4:40004"
	agent    = "100.64.0.5:40005"
	unknown  = "100.64.0.9:40009"
)

var nodes = map[string]testserver.FakeNode{
	"100.64.0.1": {Name: "phone", Tags: []string{"tag:owner"}},
	"100.64.0.2": {Name: "tv", Tags: []string{"tag:watch"}},
	"100.64.0.4": {Name: "guest", Tags: []string{"tag:stranger"}},
	"100.64.0.5": {Name: "runner", Tags: []string{"tag:agent"}},
}

type fixture struct {
	in *testserver.Instance
	c  *console.Console
}

func start(t *testing.T) *fixture {
	t.Helper()
	in := testserver.Start(t, testserver.Options{Policy: consolePolicy, WhoIs: testserver.WhoIsTags(nodes),
		KillGrace: 200 * time.Millisecond})
	c, err := console.New(console.Config{Server: in.Server, Hosts: []string{"coily", "coily.example.ts.net"},
		Heartbeat: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &fixture{in: in, c: c}
}

// do serves one request from remote to the console and returns the
// recorded response.
func (f *fixture) do(t *testing.T, remote, method, path string, body io.Reader, hdr map[string]string) *httptest.ResponseRecorder {
	t.Helper()
	r := httptest.NewRequest(method, path, body)
	r.RemoteAddr = remote
	r.Host = "coily"
	for k, v := range hdr {
		if k == "Host" {
			r.Host = v
			continue
		}
		r.Header.Set(k, v)
	}
	w := httptest.NewRecorder()
	f.c.ServeHTTP(w, r)
	return w
}

// apiAnswer is the common shape of the API's answers.
type apiAnswer struct {
	OK    bool `json:"ok"`
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
		AuditID string `json:"audit_id"`
	} `json:"error"`
}

func decode(t *testing.T, w *httptest.ResponseRecorder, v any) {
	t.Helper()
	if ct := w.Header().Get("Content-Type"); ct != "application/json" {
		t.Fatalf("content type %q (body %s)", ct, w.Body)
	}
	if err := json.Unmarshal(w.Body.Bytes(), v); err != nil {
		t.Fatalf("answer %q: %v", w.Body, err)
	}
}

func answer(t *testing.T, w *httptest.ResponseRecorder) apiAnswer {
	t.Helper()
	var a apiAnswer
	decode(t, w, &a)
	return a
}

// sseEvent is one event of a stream.
type sseEvent struct{ name, id, data string }

// readEvents reads a stream's events into a channel until it ends.
func readEvents(body io.Reader) <-chan sseEvent {
	ch := make(chan sseEvent, 64)
	go func() {
		defer close(ch)
		sc := bufio.NewScanner(body)
		var ev sseEvent
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if ev.name != "" {
					ch <- ev
				}
				ev = sseEvent{}
			case strings.HasPrefix(line, "event: "):
				ev.name = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "id: "):
				ev.id = strings.TrimPrefix(line, "id: ")
			case strings.HasPrefix(line, "data: "):
				ev.data = strings.TrimPrefix(line, "data: ")
			}
		}
	}()
	return ch
}

// remoteAs serves h to requests as if from remote (an httptest server's
// peers are on loopback, which the tailnet identity refuses).
func remoteAs(remote string, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.RemoteAddr = remote
		h.ServeHTTP(w, r)
	})
}

func writeFile(path, content string) error { return os.WriteFile(path, []byte(content), 0o600) }
