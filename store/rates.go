package store

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"

	bolt "go.etcd.io/bbolt"
)

// bucketRates holds one token bucket per key (principal × command rule).
var bucketRates = []byte("rates")

// Rate is a token-bucket limit: PerMinute tokens are added per minute, up to Burst.
type Rate struct {
	PerMinute int // > 0
	Burst     int // > 0; callers default it to PerMinute
}

// rateRecord is the stored state of one bucket: the tokens left at time At.
type rateRecord struct {
	Tokens float64   `json:"tokens"`
	At     time.Time `json:"at"` // encoded as RFC 3339 with nanoseconds
}

// tokenEpsilon absorbs float64 rounding in the refill arithmetic, so that
// waiting exactly the returned retryAfter always yields a token (instead of
// 0.9999999999999999 of one and a second 1 ms refusal). Over-spending by
// 1e-9 of a token is immaterial.
const tokenEpsilon = 1e-9

// retryToleranceMs keeps float64 noise (well below 1e-10 ms here) from
// rounding an exact retry delay up by a whole millisecond (1.000000000000001
// ms → 2 ms). Returning up to 1e-10 ms (0.1 ns) too little costs at most
// PerMinute/6e14 tokens, within tokenEpsilon whenever the delay is above the
// 1 ms minimum (PerMinute ≤ 60000).
const retryToleranceMs = 1e-10

// errRefused aborts the Take transaction so bbolt rolls it back: a refusal
// writes nothing.
var errRefused = errors.New("store: rate: no token")

// Take takes one token from the bucket named key (e.g. principal + "\x00" + rule) at time now.
// It returns ok=true when a token was available (and records the bucket), or ok=false with the
// time until one token will be available (rounded up to whole milliseconds, at least 1 ms).
// A missing bucket starts full. An undecodable bucket is ErrCorrupt (fail closed: the caller refuses).
// A clock that went backwards must not mint tokens: treat elapsed < 0 as 0 (keep the stored time).
// The read-modify-write happens in ONE bbolt Update transaction, so concurrent Takes never over-spend.
//
// Refill is elapsed.Seconds() * PerMinute/60 tokens, capped at Burst; stored
// tokens above the current Burst (a lowered policy) are capped too.
//
// A refused Take writes nothing: the Update function returns an internal
// sentinel error so bbolt rolls the transaction back. (Committing an
// unmodified bbolt transaction is not free: Commit still writes the freelist
// and meta pages and fdatasyncs.) Not recording the refusal loses nothing,
// since the refill is recomputed from the stored time on every Take.
func (d *DB) Take(key string, r Rate, now time.Time) (ok bool, retryAfter time.Duration, err error) {
	if err := r.Check(key); err != nil {
		return false, 0, err
	}
	k := []byte(key)
	err = d.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketRates)
		if b == nil {
			return fmt.Errorf("%w: bucket %s missing", ErrCorrupt, bucketRates)
		}
		data := b.Get(k)
		if data == nil && b.Bucket(k) != nil {
			return fmt.Errorf("%w: bucket in place of record", ErrCorrupt)
		}
		next, took, wait, err := r.Spend(data, now)
		if err != nil {
			return err
		}
		if !took {
			retryAfter = wait
			return errRefused
		}
		return b.Put(k, next)
	})
	switch {
	case errors.Is(err, errRefused):
		return false, retryAfter, nil
	case err != nil:
		return false, 0, fmt.Errorf("store: rate %q: %w", key, err)
	}
	return true, 0, nil
}

// Check refuses a bucket name or a rate Take cannot use: an empty or
// oversized key, a rate or burst not above zero.
func (r Rate) Check(key string) error {
	if key == "" {
		return errors.New("store: rate: empty key")
	}
	if len(key) > bolt.MaxKeySize {
		return fmt.Errorf("store: rate: key of %d bytes exceeds %d", len(key), bolt.MaxKeySize)
	}
	if r.PerMinute <= 0 || r.Burst <= 0 {
		return fmt.Errorf("store: rate %q: invalid rate %d per minute, burst %d (both must be > 0)", key, r.PerMinute, r.Burst)
	}
	return nil
}

// Spend is Take's arithmetic, for any store that keeps a bucket as the
// bytes Take writes: given the stored record (nil for none: a full
// bucket), it returns the record to store and ok when a token was
// available at now, or ok=false and the time until one will be (then
// nothing is to be stored). An undecodable record is ErrCorrupt.
func (r Rate) Spend(stored []byte, now time.Time) (next []byte, ok bool, retryAfter time.Duration, err error) {
	now = now.Round(0).UTC() // wall clock only: that is what is stored
	burst, perMinute := float64(r.Burst), float64(r.PerMinute)
	rec := rateRecord{Tokens: burst, At: now}
	if stored != nil {
		if rec, err = decodeRate(stored); err != nil {
			return nil, false, 0, err
		}
	}
	if elapsed := now.Sub(rec.At); elapsed > 0 {
		rec.Tokens += elapsed.Seconds() * perMinute / 60
		rec.At = now
	} // else: the clock went backwards (or stood still): no refill, keep the stored time
	rec.Tokens = min(rec.Tokens, burst)

	if rec.Tokens+tokenEpsilon < 1 {
		ms := math.Ceil((1-rec.Tokens)*60000/perMinute - retryToleranceMs)
		return nil, false, max(time.Duration(ms)*time.Millisecond, time.Millisecond), nil
	}
	rec.Tokens = max(rec.Tokens-1, 0)
	data, err := json.Marshal(rec)
	if err != nil {
		return nil, false, 0, fmt.Errorf("encode: %w", err)
	}
	return data, true, 0, nil
}

// decodeRate reads and validates a stored bucket. Anything but a
// complete, plausible record is ErrCorrupt: a missing field must not
// decode as zero tokens at the zero time, which would refill to a full
// bucket.
func decodeRate(data []byte) (rec rateRecord, err error) {
	var raw struct {
		Tokens *float64   `json:"tokens"`
		At     *time.Time `json:"at"`
	}
	if bytes.Equal(bytes.TrimSpace(data), []byte("null")) {
		return rec, fmt.Errorf("%w: null record", ErrCorrupt)
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		return rec, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	switch {
	case raw.Tokens == nil:
		return rec, fmt.Errorf("%w: missing tokens", ErrCorrupt)
	case raw.At == nil:
		return rec, fmt.Errorf("%w: missing at", ErrCorrupt)
	case math.IsNaN(*raw.Tokens) || math.IsInf(*raw.Tokens, 0) || *raw.Tokens < 0:
		return rec, fmt.Errorf("%w: tokens %v out of range", ErrCorrupt, *raw.Tokens)
	case raw.At.IsZero():
		return rec, fmt.Errorf("%w: zero time", ErrCorrupt)
	}
	return rateRecord{Tokens: *raw.Tokens, At: *raw.At}, nil
}
