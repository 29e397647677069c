package notify

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"time"
)

// DefaultMaxIDs bounds the delivery ids a Verifier remembers when its
// MaxIDs is 0.
const DefaultMaxIDs = 100000

// retrySpan covers the sender's retries of one delivery: every attempt
// is signed with its own timestamp, the last at most DefaultAttempts-1
// timeouts and the backoffs (under 35 s) after the first. An id is kept
// this much longer than its freshest copy, so a retry the receiver never
// saw (lost on the way, or captured) is still refused while it is fresh.
const retrySpan = time.Minute

// sweepEvery is how often a Verifier drops the ids that went stale (and
// whenever it is full).
const sweepEvery = time.Minute

// Verifier checks webhook deliveries: signature, freshness, and that no
// delivery id is accepted twice (so a captured request cannot be
// replayed, and retries are delivered once). An id is remembered until
// every copy of it seen (accepted or refused) has gone stale, and
// retrySpan more for copies it has not seen; each duplicate extends it.
// When MaxIDs ids are remembered and none is stale, a new delivery is
// refused with ErrFull (fail closed: nothing is forgotten early).
// Create one Verifier and reuse it for every request; it is safe for
// concurrent use.
type Verifier struct {
	Secret []byte
	// Tolerance is DefaultTolerance when 0.
	Tolerance time.Duration
	// Now is time.Now when nil.
	Now func() time.Time
	// MaxIDs is DefaultMaxIDs when 0.
	MaxIDs int

	mu        sync.Mutex
	seen      map[string]time.Time // delivery id → when it may be forgotten
	nextSweep time.Time
}

// Verify checks a delivery's headers and body and returns its payload; on
// any error (ErrReplay and ErrFull included) it returns none.
func (v *Verifier) Verify(h http.Header, body []byte) (*Payload, error) {
	now := time.Now()
	if v.Now != nil {
		now = v.Now()
	}
	tol := v.Tolerance
	if tol <= 0 {
		tol = DefaultTolerance
	}
	if err := VerifySignature(v.Secret, h, body, now, tol); err != nil {
		return nil, err
	}
	var p Payload
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&p); err != nil || dec.More() || p.Version != PayloadVersion || p.ID == "" || len(p.ID) > maxName {
		return nil, ErrMalformed
	}
	ts, _ := parseTimestamp(h.Get(HeaderTimestamp)) // checked by VerifySignature
	if err := v.remember(p.ID, time.Unix(ts, 0).Add(tol+retrySpan), now); err != nil {
		return nil, err // a replay or no room: no payload to act on
	}
	return &p, nil
}

// remember records id as seen until at least until; it fails if id was
// already there (extending its memory) or if there is no room for it.
func (v *Verifier) remember(id string, until, now time.Time) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.seen == nil {
		v.seen = map[string]time.Time{}
	}
	limit := v.MaxIDs
	if limit <= 0 {
		limit = DefaultMaxIDs
	}
	if len(v.seen) >= limit || !now.Before(v.nextSweep) {
		v.sweep(now)
	}
	if prev, dup := v.seen[id]; dup && !now.After(prev) {
		if until.After(prev) {
			v.seen[id] = until
		}
		return ErrReplay
	}
	if len(v.seen) >= limit {
		return fmt.Errorf("%w (%d delivery ids remembered, none stale)", ErrFull, len(v.seen))
	}
	v.seen[id] = until
	return nil
}

// sweep forgets the ids whose every copy has gone stale.
func (v *Verifier) sweep(now time.Time) {
	for id, until := range v.seen {
		if now.After(until) {
			delete(v.seen, id)
		}
	}
	v.nextSweep = now.Add(sweepEvery)
}
