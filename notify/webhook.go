package notify

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"coily.dev/coily/keystore/credref"
	"coily.dev/coily/policy"
)

// Webhook headers. The signature covers the timestamp and the body: its
// input is the decimal Unix timestamp, a ".", and the body's exact bytes.
const (
	HeaderSignature = "X-Coily-Signature" // "sha256=" + lowercase hex HMAC-SHA256
	HeaderTimestamp = "X-Coily-Timestamp" // Unix seconds of this attempt
	HeaderEvent     = "X-Coily-Event"     // the body's event, for routing
	HeaderDelivery  = "X-Coily-Delivery"  // the body's id, for logs
)

// DefaultTolerance is how far a webhook's timestamp may be from the
// receiver's clock.
const DefaultTolerance = 5 * time.Minute

// maxWebhookBody bounds a body a Verifier reads.
const maxWebhookBody = 1 << 20

// Verification failures.
var (
	ErrNoSignature  = errors.New("webhook: signature or timestamp header missing")
	ErrMalformed    = errors.New("webhook: malformed signature, timestamp or body")
	ErrBadSignature = errors.New("webhook: signature does not match")
	ErrStale        = errors.New("webhook: timestamp outside the tolerance")
	ErrReplay       = errors.New("webhook: delivery already seen")
	// ErrFull: the Verifier remembers as many delivery ids as it may and
	// none has gone stale; answer 503 so the sender retries later.
	ErrFull = errors.New("webhook: too many recent deliveries to remember another")
)

// Sign returns the signature header's value for body sent at timestamp.
func Sign(secret []byte, timestamp int64, body []byte) string {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(strconv.FormatInt(timestamp, 10)))
	m.Write([]byte{'.'})
	m.Write(body)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

// VerifySignature checks the signature and timestamp headers of a
// delivery against body; it keeps no state (Verifier also refuses
// replays).
func VerifySignature(secret []byte, h http.Header, body []byte, now time.Time, tolerance time.Duration) error {
	sig, tsText := h.Values(HeaderSignature), h.Values(HeaderTimestamp)
	if len(sig) == 0 || len(tsText) == 0 {
		return ErrNoSignature
	}
	if len(sig) != 1 || len(tsText) != 1 || len(body) > maxWebhookBody {
		return ErrMalformed
	}
	ts, ok := parseTimestamp(tsText[0])
	if !ok {
		return ErrMalformed
	}
	hexSig, ok := strings.CutPrefix(sig[0], "sha256=")
	if !ok || len(hexSig) != sha256.Size*2 || strings.ToLower(hexSig) != hexSig {
		return ErrMalformed
	}
	got, err := hex.DecodeString(hexSig)
	if err != nil {
		return ErrMalformed
	}
	want, _ := hex.DecodeString(strings.TrimPrefix(Sign(secret, ts, body), "sha256="))
	if !hmac.Equal(got, want) {
		return ErrBadSignature
	}
	if d := now.Sub(time.Unix(ts, 0)); d > tolerance || d < -tolerance {
		return ErrStale
	}
	return nil
}

// parseTimestamp accepts decimal Unix seconds: digits only, no sign, no
// leading zero, at most 12 of them.
func parseTimestamp(s string) (int64, bool) {
	if s == "" || len(s) > 12 || (s[0] == '0' && len(s) > 1) {
		return 0, false
	}
	for _, c := range []byte(s) {
		if c < '0' || c > '9' {
			return 0, false
		}
	}
	ts, err := strconv.ParseInt(s, 10, 64)
	return ts, err == nil
}

// webhookSink POSTs the signed payload.
type webhookSink struct{}

func (webhookSink) name() string { return sinkWebhook }

func (webhookSink) configured(n *policy.Notify) bool { return n.Webhook != nil }

func (webhookSink) secretRef(n *policy.Notify) credref.Ref { return n.Webhook.Secret }

func (webhookSink) send(ctx context.Context, d *delivery) error {
	p := d.content.payload
	p.ID = d.id
	body, err := json.Marshal(p)
	if err != nil {
		return permanent(fmt.Errorf("encode: %w", err))
	}
	if d.secret == "" {
		return permanent(errors.New("the webhook signing key is empty"))
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.settings.Webhook.URL, bytes.NewReader(body))
	if err != nil {
		return permanent(errors.New("bad webhook URL"))
	}
	ts := d.now().Unix()
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", userAgent)
	req.Header.Set(HeaderTimestamp, strconv.FormatInt(ts, 10))
	req.Header.Set(HeaderSignature, Sign([]byte(d.secret), ts, body))
	req.Header.Set(HeaderEvent, p.Event)
	req.Header.Set(HeaderDelivery, d.id)
	return d.do(req)
}
