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

// Callers of the fake tailnet (testserver.WebNodes), by remote address.
const (
	owner    = testserver.WebOwner
	watcher  = testserver.WebWatcher
	stranger = testserver.WebStranger
	agent    = testserver.WebAgent
	unknown  = testserver.WebUnknown
)

type fixture struct {
	in *testserver.Instance
	c  *console.Console
}

func start(t *testing.T) *fixture {
	t.Helper()
	in := testserver.Start(t, testserver.WebOptions())
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
