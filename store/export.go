package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Snapshot is what a state file holds of the shared state (Shared), read
// at one instant, for `coily state migrate` to copy to another store.
// The local part (the audit head, the request records) is not in it: it
// stays in the host's file.
type Snapshot struct {
	Stops Stops
	// Rates are the token buckets as Take stores them, by bucket name.
	Rates []RateBucket
	// Keys hold the sandboxes' secrets in clear: never print them.
	Keys   []Key
	Relays []Relay
	// Nonces are the nonces not yet expired at the snapshot's time.
	Nonces []Nonce
	Leases []Lease
}

// RateBucket is one token bucket: its name and its record as Take wrote
// it (validated).
type RateBucket struct {
	Name   string
	Record []byte
}

// Nonce is one relay nonce a sandbox used, kept until Expiry.
type Nonce struct {
	Sandbox, Nonce string
	Expiry         time.Time
}

// Export reads the shared state in one read transaction. Nonces expired
// at now are left out (they would be refused as stale before being looked
// at). Anything undecodable is ErrCorrupt: a migration copies all of it or
// nothing.
func (d *DB) Export(now time.Time) (Snapshot, error) {
	var snap Snapshot
	err := d.db.View(func(tx *bolt.Tx) error {
		var err error
		if snap.Stops, err = exportStops(tx); err != nil {
			return err
		}
		if snap.Rates, err = exportRates(tx); err != nil {
			return err
		}
		if err := eachJSON(tx, bucketKeys, func(name []byte, k Key) error {
			if k.Sandbox != string(name) {
				return fmt.Errorf("%w: key record %q names sandbox %q", ErrCorrupt, name, k.Sandbox)
			}
			snap.Keys = append(snap.Keys, k)
			return nil
		}); err != nil {
			return err
		}
		if err := eachJSON(tx, bucketRelays, func(id []byte, r Relay) error {
			if r.ID != string(id) {
				return fmt.Errorf("%w: relay record %q names id %q", ErrCorrupt, id, r.ID)
			}
			snap.Relays = append(snap.Relays, r)
			return nil
		}); err != nil {
			return err
		}
		if snap.Nonces, err = exportNonces(tx, now); err != nil {
			return err
		}
		return eachJSON(tx, bucketLeases, func(id []byte, l Lease) error {
			if l.ID != string(id) {
				return fmt.Errorf("%w: lease record %q names lease %q", ErrCorrupt, id, l.ID)
			}
			snap.Leases = append(snap.Leases, l)
			return nil
		})
	})
	if err != nil {
		return Snapshot{}, fmt.Errorf("store: export %s: %w", d.path, err)
	}
	return snap, nil
}

func exportStops(tx *bolt.Tx) (Stops, error) {
	var s Stops
	b := tx.Bucket(bucketState)
	if b == nil {
		return s, nil
	}
	for _, r := range []struct {
		key []byte
		v   any
	}{{keyLockout, &s.Lockout}, {keyPause, &s.Pause}, {keySelfPauses, &s.SelfPauses}} {
		if err := getJSON(b, r.key, r.v); err != nil && !errors.Is(err, ErrNotFound) {
			return Stops{}, err
		}
	}
	return s, nil
}

func exportRates(tx *bolt.Tx) ([]RateBucket, error) {
	b := tx.Bucket(bucketRates)
	if b == nil {
		return nil, nil
	}
	var out []RateBucket
	err := b.ForEach(func(k, v []byte) error {
		if v == nil {
			return fmt.Errorf("%w: rates: bucket %q in place of record", ErrCorrupt, k)
		}
		if _, err := decodeRate(v); err != nil {
			return fmt.Errorf("rates %q: %w", k, err)
		}
		out = append(out, RateBucket{Name: string(k), Record: bytes.Clone(v)})
		return nil
	})
	return out, err
}

// exportNonces lists the nonces unexpired at now. A key is the sandbox, a
// zero byte and the nonce; a value is the expiry, 8 bytes.
func exportNonces(tx *bolt.Tx, now time.Time) ([]Nonce, error) {
	b := tx.Bucket(bucketNonces)
	if b == nil {
		return nil, nil
	}
	var out []Nonce
	err := b.ForEach(func(k, v []byte) error {
		sb, nonce, ok := bytes.Cut(k, []byte{0})
		if !ok || len(sb) == 0 || len(nonce) == 0 || len(v) != 8 {
			return fmt.Errorf("%w: nonce record %q", ErrCorrupt, k)
		}
		exp := time.Unix(0, int64(binary.BigEndian.Uint64(v)))
		if exp.Before(now) {
			return nil
		}
		out = append(out, Nonce{Sandbox: string(sb), Nonce: string(nonce), Expiry: exp})
		return nil
	})
	return out, err
}

// eachJSON decodes every record of a bucket (none when the bucket is
// missing) and hands it to f with its key.
func eachJSON[T any](tx *bolt.Tx, bucket []byte, f func(key []byte, v T) error) error {
	b := tx.Bucket(bucket)
	if b == nil {
		return nil
	}
	return b.ForEach(func(k, _ []byte) error {
		var v T
		if err := getJSON(b, k, &v); err != nil {
			return err
		}
		return f(k, v)
	})
}

// Counts is how many of each kind a snapshot holds (nothing secret).
type Counts struct {
	Lockout, Pause      bool
	SelfPauses          int
	Rates, Keys, Relays int
	Nonces, Leases      int
}

// Counts counts the snapshot: the active self-pauses, and every record of
// the other kinds.
func (s Snapshot) Counts() Counts {
	c := Counts{Lockout: s.Stops.Lockout.Active, Pause: s.Stops.Pause.Active,
		Rates: len(s.Rates), Keys: len(s.Keys), Relays: len(s.Relays), Nonces: len(s.Nonces), Leases: len(s.Leases)}
	for _, p := range s.Stops.SelfPauses {
		if p.Active {
			c.SelfPauses++
		}
	}
	return c
}
