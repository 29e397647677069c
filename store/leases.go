package store

import (
	"errors"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"
)

// bucketLeases holds the dynamic-secret leases in use, by lease id: put
// before the command that uses one starts, deleted once the lease is
// revoked. Whatever a server leaves behind (it crashed, or could not
// revoke) its next start revokes.
var bucketLeases = []byte("leases")

// Lease is the record of one dynamic-secret lease an Exec holds. It holds
// no secret: a lease id names a lease; it cannot read what the lease
// created.
type Lease struct {
	ID        string    `json:"id"`
	Backend   string    `json:"backend"`    // the keystore backend ("vault")
	RequestID string    `json:"request_id"` // the Exec that holds it
	Rule      string    `json:"rule,omitempty"`
	Acquired  time.Time `json:"acquired"`
	Expires   time.Time `json:"expires,omitzero"`
	// Host is the host whose command holds the lease, in a fleet whose
	// hosts share their leases (etcd); "" for one host.
	Host string `json:"host,omitempty"`
}

// PutLease records a lease in use.
func (d *DB) PutLease(l Lease) error {
	if l.ID == "" {
		return errors.New("store: lease without id")
	}
	return d.put(bucketLeases, []byte(l.ID), l)
}

// DeleteLease forgets a lease (revoked). Forgetting one not recorded is
// not an error.
func (d *DB) DeleteLease(id string) error {
	err := d.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketLeases).Delete([]byte(id))
	})
	if err != nil {
		return fmt.Errorf("store: delete lease %s: %w", id, err)
	}
	return nil
}

// Leases returns every lease recorded, in id order. A record that cannot
// be decoded is ErrCorrupt (naming its key): a lease must not be skipped
// silently.
func (d *DB) Leases() ([]Lease, error) {
	var out []Lease
	err := d.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketLeases)
		return b.ForEach(func(k, _ []byte) error {
			var l Lease
			if err := getJSON(b, k, &l); err != nil {
				return err
			}
			if l.ID != string(k) {
				return fmt.Errorf("%w: lease record %q names lease %q", ErrCorrupt, k, l.ID)
			}
			out = append(out, l)
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("store: leases: %w", err)
	}
	return out, nil
}
