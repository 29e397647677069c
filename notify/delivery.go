package notify

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"coily.dev/coily/keystore"
	"coily.dev/coily/policy"
)

// delivery is one notification on its way to one sink.
type delivery struct {
	id       string // the same for every attempt
	settings *policy.Notify
	content  content
	secret   string
	client   *http.Client
	now      func() time.Time
}

// deliver sends j through s: attempts with a timeout each, retried with
// doubling backoff while the failure may pass; the outcome is counted
// and logged.
func (d *Dispatcher) deliver(s sink, j job) {
	start := d.cfg.Now()
	console := j.settings.ConsoleURL
	if console == "" {
		console = d.cfg.ConsoleURL
	}
	dl := &delivery{id: newID(), settings: j.settings, client: d.cfg.HTTPClient, now: d.cfg.Now}
	event := string(j.ev.Kind)
	wait := d.cfg.Backoff
	var err error
	attempt := 1
	for ; ; attempt++ {
		dl.content = render(j.ev, j.settings, console, d.cfg.Now())
		err = d.attempt(s, dl)
		if err == nil {
			d.metrics.result(s.name(), resultSent)
			d.log.Info("notification sent", "sink", s.name(), "event", event, "delivery", dl.id, "attempts", attempt,
				"took", d.cfg.Now().Sub(start).Round(time.Millisecond))
			return
		}
		if isPermanent(err) || attempt >= d.cfg.Attempts || d.ctx.Err() != nil {
			break
		}
		d.metrics.retry(s.name())
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-d.ctx.Done():
			t.Stop()
		}
		wait *= 2
	}
	if d.ctx.Err() != nil {
		err = fmt.Errorf("%w: %w", errClosed, err)
	}
	d.metrics.result(s.name(), resultFailed)
	d.log.Error("notification failed", "sink", s.name(), "event", event, "delivery", dl.id, "attempts", attempt, "err", err)
}

// attempt makes one try, bounded by the timeout.
func (d *Dispatcher) attempt(s sink, dl *delivery) error {
	ctx, cancel := context.WithTimeout(d.ctx, d.cfg.Timeout)
	defer cancel()
	secret, err := d.secret(ctx, s.secretRef(dl.settings))
	if err != nil {
		if errors.Is(err, keystore.ErrNotFound) || errors.Is(err, keystore.ErrNoBackend) || errors.Is(err, keystore.ErrDenied) {
			return permanent(err)
		}
		return err
	}
	dl.secret = secret
	defer func() { dl.secret = "" }()
	return s.send(ctx, dl)
}

// maxResponse bounds what is read of a sink's answer.
const maxResponse = 64 << 10

// do sends req and classifies the answer: 2xx is success; 408, 425, 429
// and 5xx may pass (retried); anything else will not. Errors name the
// method, the host and the status, never the URL's path (a webhook URL
// can hold a secret) or the answer's body.
func (dl *delivery) do(req *http.Request) error {
	resp, err := dl.client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return fmt.Errorf("%s %s: %w", req.Method, req.URL.Host, err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxResponse))
	switch c := resp.StatusCode; {
	case c >= 200 && c < 300:
		return nil
	case c == http.StatusRequestTimeout || c == http.StatusTooEarly || c == http.StatusTooManyRequests || c >= 500:
		return fmt.Errorf("%s %s: status %d", req.Method, req.URL.Host, c)
	default:
		return permanent(fmt.Errorf("%s %s: status %d", req.Method, req.URL.Host, c))
	}
}

// permanentError is a failure a retry would repeat.
type permanentError struct{ err error }

func (e permanentError) Error() string { return e.err.Error() }
func (e permanentError) Unwrap() error { return e.err }

func permanent(err error) error { return permanentError{err} }

func isPermanent(err error) bool {
	var p permanentError
	return errors.As(err, &p)
}

// newID returns a delivery id: 128 random bits in hex.
func newID() string { return rand.Text() }
