package standin

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Ntfy is a stand-in for an ntfy server (ntfy.sh's server, heckel.io/ntfy),
// implementing the parts of its HTTP API that coily and its tests use, as
// ntfy's documentation describes them:
//
//   - publish as JSON: POST or PUT to the root, {"topic", "message",
//     "title", "tags", "priority", "click", "actions", …}; topic names
//     match ^[-_A-Za-z0-9]{1,64}$, priority is 1–5, at most 3 actions,
//     each "view", "broadcast" or "http" with a label, and a url for view
//     and http; an http action's method defaults to POST and carries no
//     body with GET or HEAD; a message over 4096 bytes is refused (ntfy
//     would make it an attachment);
//   - publish with headers: POST or PUT to /<topic>, the body the message,
//     X-Title, X-Priority (1–5 or min, low, default, high, max, urgent),
//     X-Tags, X-Click and X-Actions (the JSON form only);
//   - subscribe: GET /<topic>/json streams one JSON object per line (an
//     "open" event first, then each message as published); ?poll=1 answers
//     the cached messages and closes;
//   - access tokens: with Token set, publishing and subscribing need
//     "Authorization: Bearer <token>": none is refused with 403, a wrong
//     one with 401.
//
// It is no replacement for ntfy beyond that (no attachments, no
// WebSockets, no users): ntfy's module is not served by the module proxy
// this project can reach, so tests use this (docs/operations.md,
// "Notifications").
type Ntfy struct {
	URL   string // http://127.0.0.1:PORT, the server's root
	Token string // the access token publishing and subscribing need; "" none

	srv *httptest.Server

	mu       sync.Mutex
	messages []NtfyMessage
	subs     map[chan NtfyMessage]string // subscriber → topic
	attempts int                         // publish requests, refused ones included
	fail     []int                       // statuses to answer the next publishes with
	block    chan struct{}               // while non-nil and open, publishes wait
}

// NtfyMessage is a message as ntfy's subscribe API returns it.
type NtfyMessage struct {
	ID       string       `json:"id"`
	Time     int64        `json:"time"`
	Expires  int64        `json:"expires,omitempty"`
	Event    string       `json:"event"`
	Topic    string       `json:"topic"`
	Title    string       `json:"title,omitempty"`
	Message  string       `json:"message,omitempty"`
	Priority int          `json:"priority,omitempty"`
	Tags     []string     `json:"tags,omitempty"`
	Click    string       `json:"click,omitempty"`
	Actions  []NtfyAction `json:"actions,omitempty"`
}

// NtfyAction is an action button.
type NtfyAction struct {
	ID      string            `json:"id"`
	Action  string            `json:"action"`
	Label   string            `json:"label"`
	URL     string            `json:"url,omitempty"`
	Method  string            `json:"method,omitempty"`
	Headers map[string]string `json:"headers,omitempty"`
	Body    string            `json:"body,omitempty"`
	Clear   bool              `json:"clear,omitempty"`
}

var ntfyTopicName = regexp.MustCompile(`^[-_A-Za-z0-9]{1,64}$`)

// ntfyMaxMessage is ntfy's message size limit.
const ntfyMaxMessage = 4096

// NtfyServer starts the stand-in on 127.0.0.1; token "" means anyone may
// publish and subscribe. It stops at t's cleanup.
func NtfyServer(t testing.TB, token string) *Ntfy {
	t.Helper()
	n := &Ntfy{Token: token, subs: map[chan NtfyMessage]string{}}
	n.srv = httptest.NewServer(http.HandlerFunc(n.serveHTTP))
	n.URL = n.srv.URL
	t.Cleanup(n.Close)
	return n
}

// Close stops the server and ends every subscription.
func (n *Ntfy) Close() {
	n.mu.Lock()
	for ch := range n.subs {
		delete(n.subs, ch)
		close(ch)
	}
	if n.block != nil {
		close(n.block)
		n.block = nil
	}
	n.mu.Unlock()
	n.srv.Close()
}

// FailNext answers the next len(statuses) publish requests with those
// HTTP statuses, in order, without publishing.
func (n *Ntfy) FailNext(statuses ...int) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.fail = append(n.fail, statuses...)
}

// Block holds every publish request until the returned release is called
// (or the request's context ends).
func (n *Ntfy) Block() (release func()) {
	n.mu.Lock()
	defer n.mu.Unlock()
	ch := make(chan struct{})
	n.block = ch
	var once sync.Once
	return func() {
		once.Do(func() {
			n.mu.Lock()
			defer n.mu.Unlock()
			if n.block == ch {
				n.block = nil
				close(ch)
			}
		})
	}
}

// Attempts returns how many publish requests arrived, refused ones
// included.
func (n *Ntfy) Attempts() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.attempts
}

// Messages returns the messages published to topic so far.
func (n *Ntfy) Messages(topic string) []NtfyMessage {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []NtfyMessage
	for _, m := range n.messages {
		if m.Topic == topic {
			out = append(out, m)
		}
	}
	return out
}

func (n *Ntfy) serveHTTP(w http.ResponseWriter, r *http.Request) {
	path := strings.Trim(r.URL.Path, "/")
	switch {
	case (r.Method == http.MethodPost || r.Method == http.MethodPut) && path == "":
		n.publish(w, r, "")
	case (r.Method == http.MethodPost || r.Method == http.MethodPut) && ntfyTopicName.MatchString(path):
		n.publish(w, r, path)
	case r.Method == http.MethodGet && strings.HasSuffix(path, "/json") && ntfyTopicName.MatchString(strings.TrimSuffix(path, "/json")):
		n.subscribe(w, r, strings.TrimSuffix(path, "/json"))
	default:
		ntfyError(w, http.StatusNotFound, 40401, "page not found")
	}
}

// authorized checks the access token; false means it answered.
func (n *Ntfy) authorized(w http.ResponseWriter, r *http.Request) bool {
	if n.Token == "" {
		return true
	}
	auth := r.Header.Get("Authorization")
	if auth == "" {
		ntfyError(w, http.StatusForbidden, 40301, "forbidden")
		return false
	}
	if auth != "Bearer "+n.Token {
		ntfyError(w, http.StatusUnauthorized, 40101, "unauthorized")
		return false
	}
	return true
}

func (n *Ntfy) publish(w http.ResponseWriter, r *http.Request, topic string) {
	n.mu.Lock()
	n.attempts++
	block := n.block
	var status int
	if len(n.fail) > 0 {
		status, n.fail = n.fail[0], n.fail[1:]
	}
	n.mu.Unlock()
	if block != nil {
		select {
		case <-block:
		case <-r.Context().Done():
			return
		}
	}
	if status != 0 {
		ntfyError(w, status, status*100, "injected failure")
		return
	}
	if !n.authorized(w, r) {
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		ntfyError(w, http.StatusBadRequest, 40000, "read body")
		return
	}
	var m NtfyMessage
	if topic == "" {
		err = parseNtfyJSON(body, &m)
	} else {
		err = parseNtfyHeaders(r.Header, body, topic, &m)
	}
	if err != nil {
		ntfyError(w, http.StatusBadRequest, 40000, err.Error())
		return
	}
	now := time.Now()
	m.ID, m.Time, m.Expires, m.Event = ntfyID(), now.Unix(), now.Add(12*time.Hour).Unix(), "message"
	n.mu.Lock()
	n.messages = append(n.messages, m)
	for ch, t := range n.subs {
		if t == m.Topic {
			select {
			case ch <- m:
			default: // a subscriber that does not read loses messages
			}
		}
	}
	n.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(m)
}

// ntfyPublishJSON is the JSON publish body.
type ntfyPublishJSON struct {
	Topic    string       `json:"topic"`
	Message  string       `json:"message"`
	Title    string       `json:"title"`
	Tags     []string     `json:"tags"`
	Priority int          `json:"priority"`
	Click    string       `json:"click"`
	Actions  []NtfyAction `json:"actions"`
	Markdown bool         `json:"markdown"`
}

func parseNtfyJSON(body []byte, m *NtfyMessage) error {
	var p ntfyPublishJSON
	if err := json.Unmarshal(body, &p); err != nil {
		return fmt.Errorf("invalid request: body must be a JSON message: %v", err)
	}
	if !ntfyTopicName.MatchString(p.Topic) {
		return fmt.Errorf("invalid topic %q", p.Topic)
	}
	if p.Priority < 0 || p.Priority > 5 {
		return fmt.Errorf("invalid priority %d", p.Priority)
	}
	*m = NtfyMessage{Topic: p.Topic, Title: p.Title, Message: p.Message, Priority: p.Priority, Tags: p.Tags, Click: p.Click}
	if err := checkNtfyActions(p.Actions); err != nil {
		return err
	}
	m.Actions = p.Actions
	return finishNtfyMessage(m)
}

func parseNtfyHeaders(h http.Header, body []byte, topic string, m *NtfyMessage) error {
	get := func(names ...string) string {
		for _, n := range names {
			if v := h.Get(n); v != "" {
				return v
			}
		}
		return ""
	}
	*m = NtfyMessage{Topic: topic, Message: string(body), Title: get("X-Title", "Title", "t"), Click: get("X-Click", "Click")}
	if tags := get("X-Tags", "Tags", "Tag", "ta"); tags != "" {
		for _, t := range strings.Split(tags, ",") {
			m.Tags = append(m.Tags, strings.TrimSpace(t))
		}
	}
	if p := get("X-Priority", "Priority", "prio", "p"); p != "" {
		names := map[string]int{"min": 1, "low": 2, "default": 3, "high": 4, "max": 5, "urgent": 5}
		v, ok := names[strings.ToLower(p)]
		if !ok {
			n, err := strconv.Atoi(p)
			if err != nil || n < 1 || n > 5 {
				return fmt.Errorf("invalid priority %q", p)
			}
			v = n
		}
		m.Priority = v
	}
	if a := strings.TrimSpace(get("X-Actions", "Actions", "Action")); a != "" {
		if !strings.HasPrefix(a, "[") {
			return fmt.Errorf("the stand-in takes actions in the JSON form only")
		}
		if err := json.Unmarshal([]byte(a), &m.Actions); err != nil {
			return fmt.Errorf("invalid actions: %v", err)
		}
		if err := checkNtfyActions(m.Actions); err != nil {
			return err
		}
	}
	return finishNtfyMessage(m)
}

// checkNtfyActions validates and completes actions as ntfy does.
func checkNtfyActions(actions []NtfyAction) error {
	if len(actions) > 3 {
		return fmt.Errorf("only 3 actions allowed")
	}
	for i := range actions {
		a := &actions[i]
		a.ID = ntfyID()[:10]
		a.Action, a.Method = strings.ToLower(a.Action), strings.ToUpper(a.Method)
		switch {
		case !slices.Contains([]string{"view", "broadcast", "http"}, a.Action):
			return fmt.Errorf("parameter 'action' cannot be '%s'", a.Action)
		case a.Label == "":
			return fmt.Errorf("parameter 'label' is required")
		case (a.Action == "view" || a.Action == "http") && a.URL == "":
			return fmt.Errorf("parameter 'url' is required for action '%s'", a.Action)
		case a.Action == "http" && (a.Method == "GET" || a.Method == "HEAD") && a.Body != "":
			return fmt.Errorf("parameter 'body' cannot be set if method is %s", a.Method)
		}
		if a.Action == "http" && a.Method == "" {
			a.Method = http.MethodPost
		}
	}
	return nil
}

func finishNtfyMessage(m *NtfyMessage) error {
	if len(m.Message) > ntfyMaxMessage {
		return fmt.Errorf("message longer than %d bytes (ntfy would make it an attachment)", ntfyMaxMessage)
	}
	if m.Message == "" {
		m.Message = "triggered"
	}
	return nil
}

func (n *Ntfy) subscribe(w http.ResponseWriter, r *http.Request, topic string) {
	if !n.authorized(w, r) {
		return
	}
	w.Header().Set("Content-Type", "application/x-ndjson; charset=utf-8")
	enc := json.NewEncoder(w)
	if poll := r.URL.Query().Get("poll"); poll == "1" || poll == "true" {
		for _, m := range n.Messages(topic) {
			_ = enc.Encode(m)
		}
		return
	}
	ch := make(chan NtfyMessage, 256)
	n.mu.Lock()
	n.subs[ch] = topic
	n.mu.Unlock()
	defer func() {
		n.mu.Lock()
		if _, ok := n.subs[ch]; ok {
			delete(n.subs, ch)
			close(ch)
		}
		n.mu.Unlock()
	}()
	flush := func() {
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
		}
	}
	_ = enc.Encode(NtfyMessage{ID: ntfyID(), Time: time.Now().Unix(), Event: "open", Topic: topic})
	flush()
	for {
		select {
		case <-r.Context().Done():
			return
		case m, ok := <-ch:
			if !ok {
				return
			}
			if enc.Encode(m) != nil {
				return
			}
			flush()
		}
	}
}

func ntfyError(w http.ResponseWriter, status, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"code": code, "http": status, "error": msg})
}

func ntfyID() string { return rand.Text()[:12] }

// NtfySubscription is an open JSON stream of one topic.
type NtfySubscription struct {
	C      <-chan NtfyMessage // the topic's messages, in order
	cancel context.CancelFunc
	done   chan struct{}
}

// Subscribe opens GET <url>/<topic>/json with token (if not "") and returns
// once the server has sent its "open" event; messages published after that
// arrive on C. It is closed at t's cleanup.
func Subscribe(t testing.TB, url, topic, token string) *NtfySubscription {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/"+topic+"/json", nil)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatalf("ntfy subscribe: %v", err)
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		cancel()
		t.Fatalf("ntfy subscribe: status %s", resp.Status)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var open NtfyMessage
	if !sc.Scan() || json.Unmarshal(sc.Bytes(), &open) != nil || open.Event != "open" {
		resp.Body.Close()
		cancel()
		t.Fatalf("ntfy subscribe: no open event (%q)", sc.Text())
	}
	ch := make(chan NtfyMessage, 256)
	s := &NtfySubscription{C: ch, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		defer close(ch)
		defer resp.Body.Close()
		for sc.Scan() {
			var m NtfyMessage
			if json.Unmarshal(sc.Bytes(), &m) != nil || m.Event != "message" {
				continue
			}
			select {
			case ch <- m:
			case <-ctx.Done():
				return
			}
		}
	}()
	t.Cleanup(s.Close)
	return s
}

// Close ends the subscription.
func (s *NtfySubscription) Close() {
	s.cancel()
	<-s.done
}

// Next returns the next message, failing t if none comes within d.
func (s *NtfySubscription) Next(t testing.TB, d time.Duration) NtfyMessage {
	t.Helper()
	select {
	case m, ok := <-s.C:
		if !ok {
			t.Fatal("ntfy subscription ended")
		}
		return m
	case <-time.After(d):
		t.Fatalf("no ntfy message within %s", d)
		return NtfyMessage{}
	}
}
