// Package store owns coily's persistent state in one bbolt file: the stop
// controls (lockout, pause) and a record of every Exec request.
//
// Invariants:
//   - every write is a committed, fsynced bbolt transaction before it returns;
//   - a value that cannot be decoded is an error (ErrCorrupt), never a zero
//     value: callers refuse rather than guess (a corrupt lockout record must
//     not read as "unlocked");
//   - the file is opened with a timeout, so a second server on the same state
//     directory fails fast instead of hanging on the file lock.
package store

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// Errors returned by the store.
var (
	ErrCorrupt  = errors.New("store: corrupt record")
	ErrNotFound = errors.New("store: not found")
)

var (
	bucketState    = []byte("state")
	bucketRequests = []byte("requests")
	keyLockout     = []byte("lockout")
	keyPause       = []byte("pause")
)

// OpenTimeout bounds how long Open waits for the file lock.
const OpenTimeout = 2 * time.Second

// DB is an open state file.
type DB struct {
	db *bolt.DB
}

// Open opens (creating if needed) the state file at path, mode 0600.
func Open(path string) (*DB, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: OpenTimeout})
	if err != nil {
		if errors.Is(err, berrors.ErrTimeout) {
			return nil, fmt.Errorf("store: %s is locked by another process (is another coily serving this state dir?): %w", path, err)
		}
		return nil, fmt.Errorf("store: open %s: %w", path, err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, b := range [][]byte{bucketState, bucketRequests, bucketRates, bucketKeys, bucketRelays, bucketNonces} {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("store: init %s: %w", path, err)
	}
	return &DB{db: db}, nil
}

// Close closes the file.
func (d *DB) Close() error { return d.db.Close() }

// Stop is the state of one stop control.
type Stop struct {
	Active bool      `json:"active"`
	By     string    `json:"by,omitempty"`
	Reason string    `json:"reason,omitempty"`
	Since  time.Time `json:"since"`
}

// Stops is the state of both stop controls.
type Stops struct {
	Lockout Stop
	Pause   Stop
}

// Stops reads both stop controls. A missing record is an inactive stop; an
// unreadable one is ErrCorrupt.
func (d *DB) Stops() (Stops, error) {
	var s Stops
	err := d.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketState)
		if err := getJSON(b, keyLockout, &s.Lockout); err != nil && !errors.Is(err, ErrNotFound) {
			return err
		}
		if err := getJSON(b, keyPause, &s.Pause); err != nil && !errors.Is(err, ErrNotFound) {
			return err
		}
		return nil
	})
	return s, err
}

// SetLockout persists the lockout state.
func (d *DB) SetLockout(s Stop) error { return d.put(bucketState, keyLockout, s) }

// SetPause persists the pause state.
func (d *DB) SetPause(s Stop) error { return d.put(bucketState, keyPause, s) }

func (d *DB) put(bucket, key []byte, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("store: encode %s: %w", key, err)
	}
	err = d.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucket).Put(key, data)
	})
	if err != nil {
		return fmt.Errorf("store: put %s: %w", key, err)
	}
	return nil
}

func getJSON(b *bolt.Bucket, key []byte, v any) error {
	data := b.Get(key)
	if data == nil {
		if b.Bucket(key) != nil {
			// A nested bucket where a record belongs is not "no record".
			return fmt.Errorf("%w: %s: bucket in place of record", ErrCorrupt, key)
		}
		return ErrNotFound
	}
	if bytes.Equal(bytes.TrimSpace(data), []byte("null")) {
		// JSON null decodes without error into a zero value (an inactive
		// stop); no record is ever written as null.
		return fmt.Errorf("%w: %s: null record", ErrCorrupt, key)
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("%w: %s: %v", ErrCorrupt, key, err)
	}
	return nil
}

func putJSON(b *bolt.Bucket, key []byte, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode %s: %w", key, err)
	}
	return b.Put(key, data)
}
