package policy_test

import (
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"coily.dev/coily/keystore/credref"
	"coily.dev/coily/policy"
)

func TestNotifyBlock(t *testing.T) {
	p, err := policy.Load("testdata/valid/notify.yaml")
	if err != nil {
		t.Fatal(err)
	}
	n := p.Notify()
	if n == nil {
		t.Fatal("no notify block")
	}
	want := policy.Notify{ConsoleURL: "https://coily.example-tailnet.ts.net", IncludeArgv: true,
		Events: []string{"approval", "lockout", "refusals", "pause", "checkpoint"}, RefusalCount: 5, RefusalWindow: time.Minute}
	got := *n
	got.Ntfy, got.Webhook = nil, nil
	if got.ConsoleURL != want.ConsoleURL || got.IncludeArgv != want.IncludeArgv || !slices.Equal(got.Events, want.Events) ||
		got.RefusalCount != want.RefusalCount || got.RefusalWindow != want.RefusalWindow {
		t.Errorf("notify = %+v, want %+v", got, want)
	}
	if s := n.Ntfy; s == nil || s.URL != "https://ntfy.example-tailnet.ts.net" || s.Topic != "coily-approvals" ||
		s.Token != (credref.Ref{Backend: "vault", Path: "secret/coily/ntfy", Field: "token"}) {
		t.Errorf("ntfy = %+v", s)
	}
	if s := n.Webhook; s == nil || s.URL != "http://127.0.0.1:9000/hooks/coily" || s.Secret != (credref.Ref{Backend: "file", Path: "webhook"}) {
		t.Errorf("webhook = %+v", s)
	}
	for _, e := range policy.NotifyEvents {
		if !n.Wants(e) {
			t.Errorf("Wants(%q) = false", e)
		}
	}
	if n.Wants("exec") {
		t.Error(`Wants("exec") = true`)
	}
}

func TestNotifyDefaults(t *testing.T) {
	p, err := policy.Parse("d.yaml", []byte("version: 1\nnotify:\n  ntfy: {url: \"http://100.64.0.7:8080/ntfy/\", topic: coily}\n"))
	if err != nil {
		t.Fatal(err)
	}
	n := p.Notify()
	if n.ConsoleURL != "" || n.IncludeArgv || !slices.Equal(n.Events, policy.DefaultNotifyEvents) ||
		n.RefusalCount != policy.DefaultRefusalCount || n.RefusalWindow != policy.DefaultRefusalWindow ||
		n.Webhook != nil || n.Ntfy.URL != "http://100.64.0.7:8080/ntfy" || n.Ntfy.Token != (credref.Ref{}) {
		t.Errorf("defaults: %+v %+v", *n, *n.Ntfy)
	}
	if n.Wants(policy.NotifyPause) {
		t.Error("pause is notified by default")
	}
	if p, err := policy.Parse("none.yaml", []byte("version: 1\n")); err != nil || p.Notify() != nil || p.Notify().Wants("approval") {
		t.Errorf("no block: %v %+v", err, p.Notify())
	}
}

// TestNotifyErrorsKeepSecrets: a policy that puts a secret where a
// reference or a URL belongs is refused without repeating it (reload
// refusals are logged and audited).
func TestNotifyErrorsKeepSecrets(t *testing.T) {
	const secret = "tk_Sup3rS3cretValue"
	for _, block := range []string{
		`ntfy: {url: "https://ntfy.example", topic: coily, token: "` + secret + `"}`,
		`ntfy: {url: "https://ntfy.example", topic: coily, token: "bearer:` + secret + `"}`,
		`ntfy: {url: "https://u:` + secret + `@ntfy.example", topic: coily}`,
		`webhook: {url: "https://hooks.example/x?key=` + secret + `", secret: "file:hook"}`,
		`webhook: {url: "https://hooks.example/x#` + secret + `", secret: "file:hook"}`,
		`webhook: {url: "https://hooks.example/x ` + secret + `", secret: "file:hook"}`,
		`webhook: {url: "https://hooks.example/x", secret: "` + secret + `"}`,
		`webhook: {url: "https://hooks.example/x", secret: "vault:` + secret + `"}`,
	} {
		_, err := policy.Parse("s.yaml", []byte("version: 1\nnotify:\n  "+block+"\n"))
		if err == nil {
			t.Errorf("%s: accepted", block)
			continue
		}
		if strings.Contains(err.Error(), secret) {
			t.Errorf("%s: error repeats the secret: %v", block, err)
		}
	}
}

var ntfyTopicPattern = regexp.MustCompile(`^[-_A-Za-z0-9]{1,64}$`)

// checkNotify asserts what every loaded notify block guarantees.
func checkNotify(t testing.TB, p *policy.Policy) {
	t.Helper()
	n := p.Notify()
	if n == nil {
		return
	}
	if n.Ntfy == nil && n.Webhook == nil {
		t.Errorf("notify block without a sink: %+v", *n)
	}
	urls := []string{n.ConsoleURL}
	if s := n.Ntfy; s != nil {
		urls = append(urls, s.URL)
		if !ntfyTopicPattern.MatchString(s.Topic) {
			t.Errorf("ntfy topic %q", s.Topic)
		}
		if s.Token != (credref.Ref{}) {
			if _, err := credref.Parse(s.Token.String()); err != nil {
				t.Errorf("ntfy token %v", err)
			}
		}
	}
	if s := n.Webhook; s != nil {
		urls = append(urls, s.URL)
		if _, err := credref.Parse(s.Secret.String()); err != nil {
			t.Errorf("webhook secret %v", err)
		}
	}
	for i, raw := range urls {
		if raw == "" && i == 0 {
			continue
		}
		u, err := url.Parse(raw)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil ||
			u.RawQuery != "" || u.Fragment != "" || strings.HasSuffix(raw, "/") || strings.ContainsAny(raw, " \r\n\t") {
			t.Errorf("notify URL %q (%v)", raw, err)
		}
	}
	if len(n.Events) == 0 || n.RefusalCount < 2 || n.RefusalWindow < time.Second {
		t.Errorf("notify %+v", *n)
	}
	for i, e := range n.Events {
		if !slices.Contains(policy.NotifyEvents, e) || slices.Index(n.Events, e) != i {
			t.Errorf("events %q", n.Events)
		}
	}
}
