package store

import (
	"fmt"
	"os"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"
)

var keyAuditHead = []byte("audit.head")

// AuditHead is the audit chain's head as the server last recorded it: the
// seq of a record and the hex SHA-256 of its line. The log must still hold
// that record, unchanged (audit.CheckHead): a log that does not lost
// records off its end.
type AuditHead struct {
	Seq  uint64    `json:"seq"`
	Hash string    `json:"hash"`
	At   time.Time `json:"at"` // when it was recorded
}

// AuditHead reads the recorded head: ErrNotFound when none was recorded
// (a state file older than the key, or new), ErrCorrupt when it does not
// read as a head (never a zero head, which would check nothing).
func (d *DB) AuditHead() (AuditHead, error) {
	var h AuditHead
	err := d.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketState)
		if b == nil {
			return ErrNotFound
		}
		if err := getJSON(b, keyAuditHead, &h); err != nil {
			return err
		}
		return h.valid()
	})
	if err != nil {
		return AuditHead{}, fmt.Errorf("store: audit head: %w", err)
	}
	return h, nil
}

// SetAuditHead records the audit chain's head.
func (d *DB) SetAuditHead(h AuditHead) error {
	if err := h.valid(); err != nil {
		return fmt.Errorf("store: audit head: %w", err)
	}
	return d.put(bucketState, keyAuditHead, h)
}

func (h AuditHead) valid() error {
	if h.Seq == 0 || len(h.Hash) != 64 || strings.Trim(h.Hash, "0123456789abcdef") != "" {
		return fmt.Errorf("%w: %s: seq %d, hash %q", ErrCorrupt, keyAuditHead, h.Seq, h.Hash)
	}
	return nil
}

// OpenReadOnly opens the state file at path to read it beside whatever
// else has it open for reading, waiting at most timeout for a writer's
// lock (a running server holds it for as long as it runs). It changes
// nothing: a missing file is an error wrapping os.ErrNotExist, not a new
// one; a damaged one is ErrDamaged.
func OpenReadOnly(path string, timeout time.Duration) (*DB, error) {
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	db, err := openChecked(path, &bolt.Options{ReadOnly: true, Timeout: timeout})
	if err != nil {
		return nil, err
	}
	return &DB{db: db, path: path}, nil
}
