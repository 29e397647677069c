// Package cmdtext holds text a sandboxed command controls that leaves the
// command other than as its output: a host it asked its egress proxy for,
// a TLS server name it sent, an ssh extension name, a file name it made in
// its workspace. Such text reaches the requester's answer, the audit log,
// the server's log, the console and notifications, and the command holds
// the rule's credentials: it could spell a token into a host name.
//
// A Text is made once, by New, from the execution's secrets: their forms
// redacted (scrub.Set.RedactText: also split into DNS labels, with their
// case changed, in hex or base32), then every character a reader could be
// fooled by escaped (package visible). There is no other way to make one
// with content, and no way to get the raw text back: whatever prints,
// logs, audits or sends a Text sends the safe form.
package cmdtext

import (
	"log/slog"

	"coily.dev/coily/scrub"
	"coily.dev/coily/visible"
)

// maxBytes bounds a Text: what a command names is never a page.
const maxBytes = 1024

// Text is command-controlled text made safe to show. The zero Text is "".
type Text struct{ s string }

// New makes raw safe to show: secrets redacted (a nil set redacts
// nothing), cut to 1 KiB, made visible.
func New(secrets *scrub.Set, raw string) Text {
	s := secrets.RedactText(raw)
	if len(s) > maxBytes {
		s = s[:maxBytes] + "…"
	}
	return Text{visible.Text(s)}
}

// List makes each of raw safe to show.
func List(secrets *scrub.Set, raw []string) []Text {
	if raw == nil {
		return nil
	}
	out := make([]Text, len(raw))
	for i, r := range raw {
		out[i] = New(secrets, r)
	}
	return out
}

// Strings returns the safe forms of texts.
func Strings(texts []Text) []string {
	if texts == nil {
		return nil
	}
	out := make([]string, len(texts))
	for i, t := range texts {
		out[i] = t.s
	}
	return out
}

// String returns the safe form.
func (t Text) String() string { return t.s }

// MarshalText encodes the safe form (JSON, and every encoder that asks).
func (t Text) MarshalText() ([]byte, error) { return []byte(t.s), nil }

// LogValue logs the safe form.
func (t Text) LogValue() slog.Value { return slog.StringValue(t.s) }
