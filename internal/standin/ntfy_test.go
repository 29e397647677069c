package standin

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

func post(t *testing.T, url, body string, h map[string]string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range h {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestNtfyPublishAsDocumented publishes ntfy's own documentation examples
// (JSON to the root; headers to the topic) and reads them back through
// the JSON stream and the poll API.
func TestNtfyPublishAsDocumented(t *testing.T) {
	n := NtfyServer(t, "")
	sub := Subscribe(t, n.URL, "mytopic", "")
	const doc = `{"topic": "mytopic", "message": "Disk space is low at 5.1 GB", "title": "Low disk space alert",
		"tags": ["warning","cd"], "priority": 4, "click": "https://homecamera.lan/xasds1h2xsSsa/",
		"actions": [{ "action": "view", "label": "Admin panel", "url": "https://filesrv.lan/admin" },
		            { "action": "http", "label": "Close door", "url": "https://api.mygarage.lan/", "clear": true }]}`
	if code, body := post(t, n.URL, doc, nil); code != http.StatusOK {
		t.Fatalf("JSON publish: %d %s", code, body)
	}
	m := sub.Next(t, 5*time.Second)
	if m.Topic != "mytopic" || m.Title != "Low disk space alert" || m.Priority != 4 || len(m.Tags) != 2 ||
		m.Click != "https://homecamera.lan/xasds1h2xsSsa/" || len(m.Actions) != 2 || m.Actions[1].Method != "POST" ||
		!m.Actions[1].Clear || m.Actions[0].ID == "" || m.ID == "" {
		t.Fatalf("message %+v", m)
	}
	if code, body := post(t, n.URL+"/mytopic", "Garage door has been open for 15 minutes. Close it?", map[string]string{
		"Title": "Garage", "Priority": "urgent", "Tags": "door, warning",
		"Actions": `[{"action":"http","label":"Close door","url":"https://api.mygarage.lan/","method":"PUT","body":"{\"action\": \"close\"}"}]`,
	}); code != http.StatusOK {
		t.Fatalf("header publish: %d %s", code, body)
	}
	if m := sub.Next(t, 5*time.Second); m.Priority != 5 || m.Title != "Garage" || m.Tags[1] != "warning" || m.Actions[0].Method != "PUT" {
		t.Fatalf("message %+v", m)
	}
	if got := n.Messages("mytopic"); len(got) != 2 {
		t.Fatalf("poll: %d messages", len(got))
	}
}

func TestNtfyRefuses(t *testing.T) {
	n := NtfyServer(t, "tk_standintoken")
	auth := map[string]string{"Authorization": "Bearer tk_standintoken"}
	for _, tc := range []struct {
		name, path, body string
		h                map[string]string
		want             int
	}{
		{"no token", "/", `{"topic":"a"}`, nil, http.StatusForbidden},
		{"wrong token", "/", `{"topic":"a"}`, map[string]string{"Authorization": "Bearer tk_other"}, http.StatusUnauthorized},
		{"bad topic", "/", `{"topic":"a/b"}`, auth, http.StatusBadRequest},
		{"no topic", "/", `{"message":"x"}`, auth, http.StatusBadRequest},
		{"priority", "/", `{"topic":"a","priority":9}`, auth, http.StatusBadRequest},
		{"four actions", "/", `{"topic":"a","actions":[{"action":"view","label":"1","url":"u"},{"action":"view","label":"2","url":"u"},{"action":"view","label":"3","url":"u"},{"action":"view","label":"4","url":"u"}]}`, auth, http.StatusBadRequest},
		{"no label", "/", `{"topic":"a","actions":[{"action":"view","url":"u"}]}`, auth, http.StatusBadRequest},
		{"no url", "/", `{"topic":"a","actions":[{"action":"http","label":"x"}]}`, auth, http.StatusBadRequest},
		{"bad action", "/", `{"topic":"a","actions":[{"action":"exec","label":"x","url":"u"}]}`, auth, http.StatusBadRequest},
		{"GET with body", "/", `{"topic":"a","actions":[{"action":"http","label":"x","url":"u","method":"GET","body":"b"}]}`, auth, http.StatusBadRequest},
		{"too long", "/", `{"topic":"a","message":"` + strings.Repeat("x", 5000) + `"}`, auth, http.StatusBadRequest},
		{"not JSON", "/", `topic=a`, auth, http.StatusBadRequest},
		{"ok", "/", `{"topic":"a"}`, auth, http.StatusOK},
	} {
		if code, body := post(t, n.URL+tc.path, tc.body, tc.h); code != tc.want {
			t.Errorf("%s: %d %s, want %d", tc.name, code, body, tc.want)
		}
	}
	if got := n.Messages("a"); len(got) != 1 || got[0].Message != "triggered" {
		t.Errorf("messages %+v", got)
	}
	n.FailNext(503)
	if code, _ := post(t, n.URL, `{"topic":"a"}`, auth); code != 503 {
		t.Errorf("FailNext: %d", code)
	}
}
