package policy

import (
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"coily.dev/coily/keystore/credref"
)

// Notification events a policy may ask for (notify.events).
const (
	// NotifyApproval: an Exec waits for a human's approval.
	NotifyApproval = "approval"
	// NotifyLockout: the server was locked out.
	NotifyLockout = "lockout"
	// NotifyRefusals: one caller was refused refusals.count times within
	// refusals.window.
	NotifyRefusals = "refusals"
	// NotifyPause: the server was paused.
	NotifyPause = "pause"
	// NotifyCheckpoint: a copy of a signed checkpoint of the audit log
	// (after every stop control's record, else at most hourly), so that
	// the owner's phone keeps one the host cannot take back.
	NotifyCheckpoint = "checkpoint"
)

// NotifyEvents lists every notification event, in a stable order.
var NotifyEvents = []string{NotifyApproval, NotifyLockout, NotifyRefusals, NotifyPause, NotifyCheckpoint}

// DefaultNotifyEvents are the events of a notify block that names none.
var DefaultNotifyEvents = []string{NotifyApproval, NotifyLockout, NotifyRefusals, NotifyCheckpoint}

// Defaults and bounds of notify.refusals.
const (
	DefaultRefusalCount  = 10
	DefaultRefusalWindow = 5 * time.Minute
	MaxRefusalCount      = 10000
	MinRefusalWindow     = time.Second
	MaxRefusalWindow     = 24 * time.Hour
)

// maxNotifyURL bounds a URL in the notify block.
const maxNotifyURL = 2048

// ntfyTopic is ntfy's topic name grammar.
var ntfyTopic = regexp.MustCompile(`^[-_A-Za-z0-9]{1,64}$`)

// Notify is the policy's notify block: which events coily pushes to the
// owner, through which sinks, with what in them (package notify delivers).
// Secrets are credential references, fetched through the keystore when a
// notification is sent; the policy never holds a value.
type Notify struct {
	// ConsoleURL is the web console's base URL, without a trailing slash;
	// "" means the server's default (its tailnet name, when known).
	ConsoleURL string
	// IncludeArgv puts the full argv of a waiting approval in its
	// notification; by default only the rule, the requester, the approval
	// id and its expiry are sent.
	IncludeArgv bool
	// Events are the events notified (NotifyEvents).
	Events []string
	// RefusalCount refusals of one caller within RefusalWindow make one
	// refusals notification; the next comes in a later window.
	RefusalCount  int
	RefusalWindow time.Duration
	Ntfy          *NtfySink
	Webhook       *WebhookSink
}

// NtfySink publishes to an ntfy server.
type NtfySink struct {
	// URL is the server's root (where JSON is published), without a
	// trailing slash.
	URL   string
	Topic string
	// Token is the access token's reference (zero: no authentication).
	Token credref.Ref
}

// WebhookSink POSTs signed JSON to a URL.
type WebhookSink struct {
	URL string
	// Secret is the reference of the HMAC-SHA256 signing key.
	Secret credref.Ref
}

// Wants reports whether event is notified.
func (n *Notify) Wants(event string) bool {
	return n != nil && slices.Contains(n.Events, event)
}

// Notify returns the policy's notify block, or nil when it has none.
func (p *Policy) Notify() *Notify { return p.notify }

type notifyFile struct {
	ConsoleURL  string        `yaml:"console_url"`
	IncludeArgv bool          `yaml:"include_argv"`
	Events      []string      `yaml:"events"`
	Refusals    *refusalsFile `yaml:"refusals"`
	Ntfy        *ntfyFile     `yaml:"ntfy"`
	Webhook     *webhookFile  `yaml:"webhook"`
}

type refusalsFile struct {
	Count  *int   `yaml:"count"`
	Window string `yaml:"window"`
}

type ntfyFile struct {
	URL   string `yaml:"url"`
	Topic string `yaml:"topic"`
	Token string `yaml:"token"`
}

type webhookFile struct {
	URL    string `yaml:"url"`
	Secret string `yaml:"secret"`
}

// notify validates the notify block.
func (b *builder) notify(p *Policy, f *notifyFile) {
	if f == nil {
		return
	}
	at := func(path ...any) *yaml.Node { return b.at(append([]any{"notify"}, path...)...) }
	n := &Notify{IncludeArgv: f.IncludeArgv, RefusalCount: DefaultRefusalCount, RefusalWindow: DefaultRefusalWindow}
	if f.ConsoleURL != "" {
		u, err := notifyURL(f.ConsoleURL)
		if err != nil {
			b.failAt(at("console_url"), "notify: console_url: %v", err)
		}
		n.ConsoleURL = u
	}
	n.Events = b.notifyEvents(f.Events, at)
	if r := f.Refusals; r != nil {
		if r.Count != nil {
			n.RefusalCount = *r.Count
			if n.RefusalCount < 2 || n.RefusalCount > MaxRefusalCount {
				b.failAt(at("refusals", "count"), "notify: refusals.count must be between 2 and %d, got %d", MaxRefusalCount, n.RefusalCount)
			}
		}
		if r.Window != "" {
			d, err := time.ParseDuration(r.Window)
			if err != nil || d < MinRefusalWindow || d > MaxRefusalWindow {
				b.failAt(at("refusals", "window"), "notify: refusals.window %q must be a duration between %s and %s", r.Window, MinRefusalWindow, MaxRefusalWindow)
			}
			n.RefusalWindow = d
		}
	}
	n.Ntfy = b.ntfySink(f.Ntfy, at)
	n.Webhook = b.webhookSink(f.Webhook, at)
	if n.Ntfy == nil && n.Webhook == nil {
		b.failAt(at(), "notify: name a sink (ntfy or webhook)")
	}
	p.notify = n
}

func (b *builder) notifyEvents(events []string, at func(...any) *yaml.Node) []string {
	if events == nil {
		return slices.Clone(DefaultNotifyEvents)
	}
	if len(events) == 0 {
		b.failAt(at("events"), "notify: events must not be empty (remove the notify block to notify nothing)")
	}
	for i, e := range events {
		switch {
		case !slices.Contains(NotifyEvents, e):
			b.failAt(at("events", i), "notify: unknown event %q (want %s)", e, strings.Join(NotifyEvents, ", "))
		case slices.Index(events, e) != i:
			b.failAt(at("events", i), "notify: event %q named twice", e)
		}
	}
	return slices.Clone(events)
}

func (b *builder) ntfySink(f *ntfyFile, at func(...any) *yaml.Node) *NtfySink {
	if f == nil {
		return nil
	}
	s := &NtfySink{Topic: f.Topic}
	var err error
	if s.URL, err = notifyURL(f.URL); err != nil {
		b.failAt(at("ntfy", "url"), "notify: ntfy.url: %v", err)
	}
	if !ntfyTopic.MatchString(f.Topic) {
		b.failAt(at("ntfy", "topic"), "notify: ntfy.topic %q must match %s", f.Topic, ntfyTopic)
	}
	if f.Token != "" {
		if s.Token, err = credref.Parse(f.Token); err != nil {
			b.failAt(at("ntfy", "token"), "notify: ntfy.token: %s", refHint)
		}
	}
	return s
}

func (b *builder) webhookSink(f *webhookFile, at func(...any) *yaml.Node) *WebhookSink {
	if f == nil {
		return nil
	}
	s := &WebhookSink{}
	var err error
	if s.URL, err = notifyURL(f.URL); err != nil {
		b.failAt(at("webhook", "url"), "notify: webhook.url: %v", err)
	}
	if f.Secret == "" {
		b.failAt(at("webhook"), "notify: webhook.secret is required (a credential reference to the signing key)")
	} else if s.Secret, err = credref.Parse(f.Secret); err != nil {
		b.failAt(at("webhook", "secret"), "notify: webhook.secret: %s", refHint)
	}
	return s
}

// refHint is the error of a secret that is not a credential reference.
// It does not repeat what was written: that may be the secret itself.
const refHint = "want a credential reference (vault:<path>#<field>, keychain:<service>/<account> or file:<name>), never the value"

// notifyURL checks an http(s) URL of the notify block and returns it
// without a trailing slash. No credentials, query or fragment: secrets
// come from the keystore, and paths are appended to it. Errors do not
// repeat the URL (a webhook URL can be a secret of its own).
func notifyURL(s string) (string, error) {
	if s == "" {
		return "", fmt.Errorf("a URL is required")
	}
	if len(s) > maxNotifyURL {
		return "", fmt.Errorf("URL longer than %d bytes", maxNotifyURL)
	}
	if strings.IndexFunc(s, func(r rune) bool { return r <= ' ' || r == 0x7f || r >= 0x80 }) >= 0 {
		return "", fmt.Errorf("URL contains a space, a control or a non-ASCII character")
	}
	u, err := url.Parse(s)
	switch {
	case err != nil:
		return "", fmt.Errorf("not a URL")
	case u.Scheme != "http" && u.Scheme != "https":
		return "", fmt.Errorf("URL must start with https:// or http://")
	case u.Host == "" || u.Opaque != "":
		return "", fmt.Errorf("URL has no host")
	case u.User != nil:
		return "", fmt.Errorf("URL must not carry credentials (name them as a credential reference)")
	case u.RawQuery != "" || u.ForceQuery || u.Fragment != "" || strings.Contains(s, "#"):
		return "", fmt.Errorf("URL must have no query or fragment")
	case u.Port() != "" && !validPort(u.Port()):
		return "", fmt.Errorf("URL has a bad port")
	}
	return strings.TrimRight(s, "/"), nil
}

func validPort(p string) bool {
	n := 0
	for _, c := range p {
		if c < '0' || c > '9' {
			return false
		}
		n = n*10 + int(c-'0')
		if n > 65535 {
			return false
		}
	}
	return n > 0
}
