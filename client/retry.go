package client

import (
	"context"
	"errors"
	"time"

	coilyv1 "coily.dev/coily/proto/coily/v1"
	"coily.dev/coily/refusal"
)

// The retry of a rate-limit refusal, every client's (coily, coily-client,
// coily-exec and the shims; the filesystem transport's timing is in
// package folder, its loop is this one).
const (
	RateLimitRetries = 3
	FirstBackoff     = time.Second
	MaxRetryDelay    = 30 * time.Second
)

// RetryRateLimited runs once, retrying a rate-limit refusal up to retries
// times: after the delay the refusal asks for, or else after a backoff
// that starts at first and doubles; every delay is capped at maxDelay.
// Every other outcome is returned at once.
func RetryRateLimited(ctx context.Context, retries int, first, maxDelay time.Duration, once func() (*coilyv1.ExecExit, error)) (*coilyv1.ExecExit, error) {
	backoff := first
	for attempt := 0; ; attempt++ {
		v, err := once()
		var r *refusal.Error
		if !errors.As(err, &r) || r.Code != refusal.RateLimit || attempt >= retries {
			return v, err
		}
		delay := r.RetryAfter
		if delay <= 0 {
			delay, backoff = backoff, 2*backoff
		}
		t := time.NewTimer(min(delay, maxDelay))
		select {
		case <-ctx.Done():
			t.Stop()
			return v, err
		case <-t.C:
		}
	}
}
