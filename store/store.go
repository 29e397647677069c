// Package store owns coily's persistent state in one bbolt file: the stop
// controls (lockout, pause), the audit chain's head as last recorded, a
// record of every Exec request, and the dynamic-secret leases in use (until
// they are revoked).
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
	"runtime/debug"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// Errors returned by the store.
var (
	ErrCorrupt  = errors.New("store: corrupt record")
	ErrNotFound = errors.New("store: not found")
	// ErrDamaged reports a state file bbolt cannot use (zeroed, truncated,
	// not a bbolt file): it is never opened as if empty.
	ErrDamaged = errors.New("store: state file is damaged")
)

var (
	bucketState    = []byte("state")
	bucketRequests = []byte("requests")
	keyLockout     = []byte("lockout")
	keyPause       = []byte("pause")
	keySelfPauses  = []byte("pause.self")
)

// OpenTimeout bounds how long Open waits for the file lock.
const OpenTimeout = 2 * time.Second

// DB is an open state file.
type DB struct {
	db   *bolt.DB
	path string
	// created is set when the file did not exist, or was empty, before
	// Open: the state it would hold is gone, not "unlocked".
	created bool
}

// Created reports whether Open found no state: the file was missing or
// empty (zero bytes). The caller decides whether that is a first start or
// a lost state file (the server checks the audit log).
func (d *DB) Created() bool { return d.created }

// Path is the state file's path.
func (d *DB) Path() string { return d.path }

// Open opens (creating if needed) the state file at path, mode 0600. A
// file bbolt cannot use — zeroed, truncated, not a bbolt file, failing
// bbolt's consistency check — is an error wrapping ErrDamaged that names
// the file (never a panic or SIGBUS: faults while reading the mapping are
// recovered); it is not replaced.
func Open(path string) (*DB, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	created := false
	switch fi, err := os.Stat(path); {
	case errors.Is(err, os.ErrNotExist):
		created = true
	case err != nil:
		return nil, fmt.Errorf("store: %w", err)
	case fi.Size() == 0:
		created = true
	case fi.Size() < 2*int64(os.Getpagesize()) || fi.Size()%int64(os.Getpagesize()) != 0:
		return nil, damaged(path, fmt.Errorf("%d bytes is not a whole number of pages", fi.Size()))
	}
	db, err := openChecked(path, &bolt.Options{Timeout: OpenTimeout})
	if err != nil {
		return nil, err
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, b := range [][]byte{bucketState, bucketRequests, bucketRates, bucketKeys, bucketRelays, bucketNonces, bucketLeases} {
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
	return &DB{db: db, path: path, created: created}, nil
}

// openChecked opens the file with bbolt and runs its consistency check,
// turning a fault on the mapping (a file truncated under bbolt: SIGBUS) or
// a panic inside bbolt into ErrDamaged.
func openChecked(path string, opts *bolt.Options) (db *bolt.DB, err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if p := recover(); p != nil {
			if db != nil {
				db.Close()
			}
			db, err = nil, damaged(path, fmt.Errorf("%v", p))
		}
	}()
	db, err = bolt.Open(path, 0o600, opts)
	if err != nil {
		if errors.Is(err, berrors.ErrTimeout) {
			return nil, fmt.Errorf("store: %s is locked by another process (is another coily serving this state dir?): %w", path, err)
		}
		return nil, damaged(path, err)
	}
	err = db.View(func(tx *bolt.Tx) error {
		for e := range tx.Check() {
			return e
		}
		return nil
	})
	if err != nil {
		db.Close()
		return nil, damaged(path, err)
	}
	return db, nil
}

// RecoveryHint is what to do about a damaged state file.
const RecoveryHint = "restore it from a backup, or run `coily state rebuild` (it keeps the damaged file aside, " +
	"rebuilds what can be rebuilt and starts locked out); `coily state check` says more"

func damaged(path string, why error) error {
	return fmt.Errorf("%w: %s: %v: %s", ErrDamaged, path, why, RecoveryHint)
}

// Close closes the file.
func (d *DB) Close() error { return d.db.Close() }

// Stop is the state of one stop control.
type Stop struct {
	Active bool      `json:"active"`
	By     string    `json:"by,omitempty"`
	Reason string    `json:"reason,omitempty"`
	Since  time.Time `json:"since"`
	// DecidedOn is, on a loosening written to a shared state (an unlock
	// by SetLockout, a resume by SetPauses), the stop state it was decided
	// on: it is written only while the records it lifts are those of that
	// state, in one compare-and-swap, else it fails ErrChanged. A lockout
	// or a pause is written whatever the state. Never stored; nil (and one
	// host's file, where no other host writes) writes unconditionally.
	DecidedOn *Stops `json:"-"`
}

// Stops is the state of both stop controls.
type Stops struct {
	Lockout Stop
	Pause   Stop
	// SelfPauses are the pauses principals without the pause permission
	// set on themselves, by principal: each refuses only that
	// principal's new commands.
	SelfPauses map[string]Stop
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
		if err := getJSON(b, keySelfPauses, &s.SelfPauses); err != nil && !errors.Is(err, ErrNotFound) {
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

// SetPauses persists the server's pause and the principals' pauses of
// themselves in one transaction.
func (d *DB) SetPauses(pause Stop, self map[string]Stop) error {
	if self == nil {
		self = map[string]Stop{}
	}
	p, err := json.Marshal(pause)
	if err != nil {
		return fmt.Errorf("store: encode %s: %w", keyPause, err)
	}
	sp, err := json.Marshal(self)
	if err != nil {
		return fmt.Errorf("store: encode %s: %w", keySelfPauses, err)
	}
	err = d.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketState)
		if err := b.Put(keyPause, p); err != nil {
			return err
		}
		return b.Put(keySelfPauses, sp)
	})
	if err != nil {
		return fmt.Errorf("store: put pauses: %w", err)
	}
	return nil
}

// SetSelfPause sets one principal's pause of itself, in one transaction
// with the read of the others' (which it keeps).
func (d *DB) SetSelfPause(principal string, st Stop) error {
	err := d.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketState)
		var self map[string]Stop
		if err := getJSON(b, keySelfPauses, &self); err != nil && !errors.Is(err, ErrNotFound) {
			return err
		}
		if self == nil {
			self = map[string]Stop{}
		}
		self[principal] = st
		data, err := json.Marshal(self)
		if err != nil {
			return fmt.Errorf("encode %s: %w", keySelfPauses, err)
		}
		return b.Put(keySelfPauses, data)
	})
	if err != nil {
		return fmt.Errorf("store: put %s: %w", keySelfPauses, err)
	}
	return nil
}

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
