package fastexec

import (
	"context"
	"errors"
	"time"
)

// Retry settings of a rate-limit refusal, the general client's too
// (docs/architecture.md, package client).
const (
	RateLimitRetries = 3
	FirstBackoff     = time.Second
	MaxRetryDelay    = 30 * time.Second
)

// RetryRateLimited runs once, retrying a rate-limit refusal up to retries
// times: after the delay the refusal asks for (retryAfter), or else after
// a backoff that starts at first and doubles; every delay is capped at
// maxDelay. Every other outcome is returned at once.
func RetryRateLimited[T any](ctx context.Context, retries int, first, maxDelay time.Duration,
	retryAfter func(error) (time.Duration, bool), once func() (T, error)) (T, error) {
	backoff := first
	for attempt := 0; ; attempt++ {
		v, err := once()
		delay, limited := retryAfter(err)
		if !limited || attempt >= retries {
			return v, err
		}
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

// Run is Exec with a rate-limit refusal retried as the general client
// retries it.
func (c Call) Run(ctx context.Context, req Request) (*Exit, error) {
	return RetryRateLimited(ctx, RateLimitRetries, FirstBackoff, MaxRetryDelay, func(err error) (time.Duration, bool) {
		var st *StatusError
		if errors.As(err, &st) && st.Reason == "rate-limit" {
			return st.RetryAfter, true
		}
		return 0, false
	}, func() (*Exit, error) { return c.Exec(ctx, req) })
}
