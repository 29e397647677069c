package notify

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"golang.org/x/net/http/httpguts"

	"coily.dev/coily/keystore/credref"
	"coily.dev/coily/policy"
)

// ntfyMessage is ntfy's JSON publish body (POST to the server's root).
type ntfyMessage struct {
	Topic    string       `json:"topic"`
	Title    string       `json:"title,omitempty"`
	Message  string       `json:"message"`
	Priority int          `json:"priority,omitempty"`
	Tags     []string     `json:"tags,omitempty"`
	Click    string       `json:"click,omitempty"`
	Actions  []ntfyAction `json:"actions,omitempty"`
}

// ntfyAction is an action button: view opens URL; http sends a request
// to it from the phone (POST with no body: the console identifies the
// phone by its tailnet identity).
type ntfyAction struct {
	Action string `json:"action"`
	Label  string `json:"label"`
	URL    string `json:"url"`
	Method string `json:"method,omitempty"`
	Clear  bool   `json:"clear,omitempty"`
}

// ntfyMessageOf renders c for topic.
func ntfyMessageOf(topic string, c content) ntfyMessage {
	m := ntfyMessage{Topic: topic, Title: c.title, Message: c.message, Priority: c.priority, Tags: c.tags, Click: c.click}
	for _, a := range c.actions {
		na := ntfyAction{Action: "view", Label: a.label, URL: a.url}
		if a.post {
			na.Action, na.Method, na.Clear = "http", http.MethodPost, true
		}
		m.Actions = append(m.Actions, na)
	}
	return m
}

// ntfySink publishes to an ntfy server.
type ntfySink struct{}

func (ntfySink) name() string { return sinkNtfy }

func (ntfySink) configured(n *policy.Notify) bool { return n.Ntfy != nil }

func (ntfySink) secretRef(n *policy.Notify) credref.Ref { return n.Ntfy.Token }

func (ntfySink) send(ctx context.Context, d *delivery) error {
	s := d.settings.Ntfy
	body, err := json.Marshal(ntfyMessageOf(s.Topic, d.content))
	if err != nil {
		return permanent(fmt.Errorf("encode: %w", err))
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.URL+"/", bytes.NewReader(body))
	if err != nil {
		return permanent(errors.New("bad ntfy URL"))
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", userAgent)
	if s.Token != (credref.Ref{}) {
		if d.secret == "" || !httpguts.ValidHeaderFieldValue(d.secret) {
			// Not repeated: it is the secret.
			return permanent(errors.New("the ntfy token is empty or not a valid header value"))
		}
		req.Header.Set("Authorization", "Bearer "+d.secret)
	}
	return d.do(req)
}
