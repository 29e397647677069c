package notify_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"coily.dev/coily/internal/poll"
	"coily.dev/coily/keystore"
	"coily.dev/coily/notify"
	"coily.dev/coily/policy"
)

// Secrets the tests hand the keystore; none may appear in a notification.
const (
	ntfyToken  = "tk_notifytesttoken0123456789"
	webhookKey = "whsec_notifytestkey0123456789"
)

// fileKeystore writes a credentials file with the ntfy token and the
// webhook key and returns a keystore over it that caches nothing.
func fileKeystore(t testing.TB) (*keystore.Keystore, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "credentials")
	if err := os.WriteFile(path, []byte("ntfy="+ntfyToken+"\nwebhook="+webhookKey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return keystore.New(keystore.Config{Backends: map[string]keystore.Backend{keystore.BackendFile: keystore.NewFile(path)},
		CacheTTL: -1}), path
}

// notifyBlock parses a policy whose notify block is block (indented by
// two spaces per line).
func notifyBlock(t testing.TB, block string) *policy.Notify {
	t.Helper()
	p, err := policy.Parse("notify.yaml", []byte("version: 1\nnotify:\n"+block))
	if err != nil {
		t.Fatal(err)
	}
	return p.Notify()
}

// start starts a dispatcher with fast retries, closed at t's cleanup.
func start(t testing.TB, cfg notify.Config) (*notify.Dispatcher, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	cfg.Metrics = reg
	if cfg.Backoff == 0 {
		cfg.Backoff = 20 * time.Millisecond
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 5 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	d, err := notify.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := d.Close(ctx); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return d, reg
}

// count reads coily_notifications_total{sink, result} (or, with result
// "retries", coily_notification_retries_total{sink}).
func count(t testing.TB, reg *prometheus.Registry, sink, result string) float64 {
	t.Helper()
	name := "coily_notifications_total"
	if result == "retries" {
		name = "coily_notification_retries_total"
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["sink"] == sink && (result == "retries" || labels["result"] == result) {
				return m.GetCounter().GetValue()
			}
		}
	}
	t.Fatalf("no %s{sink=%q,result=%q}", name, sink, result)
	return 0
}

// receiver is a webhook endpoint that verifies every delivery with
// notify.Verifier and keeps the raw requests.
type receiver struct {
	URL string
	V   *notify.Verifier
	C   chan *notify.Payload // accepted deliveries

	mu       sync.Mutex
	raw      []rawRequest
	refusals []error
}

type rawRequest struct {
	h    http.Header
	body []byte
}

func newReceiver(t testing.TB) *receiver {
	r := &receiver{V: &notify.Verifier{Secret: []byte(webhookKey)}, C: make(chan *notify.Payload, 64)}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, err := io.ReadAll(io.LimitReader(req.Body, 1<<20))
		if err != nil || req.Method != http.MethodPost || req.Header.Get("Content-Type") != "application/json" {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		r.mu.Lock()
		r.raw = append(r.raw, rawRequest{req.Header.Clone(), body})
		r.mu.Unlock()
		p, err := r.V.Verify(req.Header, body)
		if err != nil {
			r.mu.Lock()
			r.refusals = append(r.refusals, err)
			r.mu.Unlock()
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		if p.ID != req.Header.Get(notify.HeaderDelivery) || p.Event != req.Header.Get(notify.HeaderEvent) {
			http.Error(w, "headers disagree with the body", http.StatusBadRequest)
			return
		}
		r.C <- p
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	r.URL = srv.URL + "/hooks/coily"
	return r
}

func (r *receiver) next(t testing.TB, d time.Duration) *notify.Payload {
	t.Helper()
	select {
	case p := <-r.C:
		return p
	case <-time.After(d):
		t.Fatalf("no webhook delivery within %s", d)
		return nil
	}
}

func (r *receiver) last() rawRequest {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.raw[len(r.raw)-1]
}

// replay POSTs a raw request again and returns the status.
func (r *receiver) replay(t testing.TB, raw rawRequest) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, r.URL, strings.NewReader(string(raw.body)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header = raw.h.Clone()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func approvalEvent(argv ...string) notify.Event {
	now := time.Now()
	return notify.Event{Kind: notify.KindApproval, Approval: &notify.Approval{ID: "0123456789abcdef0123456789abcdef",
		Rule: "gh-repo-delete", Requester: "tag:agent", Argv: argv, Created: now, Expires: now.Add(5 * time.Minute)}}
}

// sent waits until n notifications of sink are counted as sent (the
// subscriber can see a message before the publisher has its answer).
func sent(t testing.TB, reg *prometheus.Registry, sink string, n float64) {
	t.Helper()
	poll.Until(t, 5*time.Second, "the deliveries to be counted", func() bool { return count(t, reg, sink, "sent") >= n })
	if got := count(t, reg, sink, "sent"); got != n {
		t.Errorf("%s sent = %v, want %v", sink, got, n)
	}
}
