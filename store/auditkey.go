package store

import (
	"errors"
	"fmt"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"
)

var (
	keyAuditSigner     = []byte("audit.signer")
	keyAuditCheckpoint = []byte("audit.checkpoint")
)

// AuditSigner is the private key the server signs its audit log's
// checkpoints with (a golang.org/x/mod/sumdb/note key, "PRIVATE+KEY+…"),
// kept in the state file beside the sandboxes' signing keys, and its
// public verifier key. It is made once and never replaced, not even at a
// lockout: witnesses pin the verifier key, and a new one would look to
// them like a forged log (package audit, "Signed checkpoints").
type AuditSigner struct {
	Key      string    `json:"key"`      // secret: never logged or printed
	Verifier string    `json:"verifier"` // public
	Created  time.Time `json:"created"`
}

// String names the signer by its public key, never the private one.
func (s AuditSigner) String() string { return "audit signer " + s.Verifier }

// EnsureAuditSigner returns the audit signer, making it with gen (one
// transaction: two calls never keep two keys) when the state file has
// none. A record that does not read as a key is ErrCorrupt, never
// replaced.
func (d *DB) EnsureAuditSigner(gen func() (skey, vkey string, err error), now time.Time) (AuditSigner, error) {
	var s AuditSigner
	err := d.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketState)
		err := getJSON(b, keyAuditSigner, &s)
		if err == nil {
			return s.valid()
		}
		if !errors.Is(err, ErrNotFound) {
			return err
		}
		if s.Key, s.Verifier, err = gen(); err != nil {
			return err
		}
		s.Created = now
		if err := s.valid(); err != nil {
			return err
		}
		return putJSON(b, keyAuditSigner, s)
	})
	if err != nil {
		return AuditSigner{}, fmt.Errorf("store: audit signer: %w", err)
	}
	return s, nil
}

// AuditSigner reads the audit signer: ErrNotFound when none was made.
func (d *DB) AuditSigner() (AuditSigner, error) {
	var s AuditSigner
	err := d.db.View(func(tx *bolt.Tx) error {
		if err := getJSON(tx.Bucket(bucketState), keyAuditSigner, &s); err != nil {
			return err
		}
		return s.valid()
	})
	if err != nil {
		return AuditSigner{}, fmt.Errorf("store: audit signer: %w", err)
	}
	return s, nil
}

func (s AuditSigner) valid() error {
	if !strings.HasPrefix(s.Key, "PRIVATE+KEY+") || s.Verifier == "" || strings.ContainsAny(s.Verifier, " \n") {
		return fmt.Errorf("%w: %s does not hold a key", ErrCorrupt, keyAuditSigner)
	}
	return nil
}

// AuditCheckpoint is the latest signed checkpoint of the audit log (a
// signed note, as audit.SignCheckpoint writes it) and when it was signed.
type AuditCheckpoint struct {
	Signed []byte    `json:"signed"`
	At     time.Time `json:"at"`
}

// AuditCheckpoint reads the latest checkpoint: ErrNotFound when none was
// recorded.
func (d *DB) AuditCheckpoint() (AuditCheckpoint, error) {
	var c AuditCheckpoint
	err := d.db.View(func(tx *bolt.Tx) error {
		if err := getJSON(tx.Bucket(bucketState), keyAuditCheckpoint, &c); err != nil {
			return err
		}
		if len(c.Signed) == 0 {
			return fmt.Errorf("%w: %s is empty", ErrCorrupt, keyAuditCheckpoint)
		}
		return nil
	})
	if err != nil {
		return AuditCheckpoint{}, fmt.Errorf("store: audit checkpoint: %w", err)
	}
	return c, nil
}

// SetAuditCheckpoint records the latest checkpoint, next to the audit
// head.
func (d *DB) SetAuditCheckpoint(c AuditCheckpoint) error {
	if len(c.Signed) == 0 {
		return fmt.Errorf("store: audit checkpoint: %w: empty", ErrCorrupt)
	}
	return d.put(bucketState, keyAuditCheckpoint, c)
}
