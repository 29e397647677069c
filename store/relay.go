package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"
)

var (
	bucketKeys   = []byte("keys")
	bucketRelays = []byte("relays")
	bucketNonces = []byte("nonces")
)

// ErrNonceSeen reports a nonce already used by the same sandbox.
var ErrNonceSeen = errors.New("store: nonce already used")

// Key is a sandbox's descriptor signing key, held only by the server.
type Key struct {
	Sandbox string    `json:"sandbox"`
	Secret  []byte    `json:"secret"`
	Created time.Time `json:"created"`
	// Generation counts the keys this sandbox has had; a descriptor signed
	// with an earlier generation no longer verifies.
	Generation int `json:"generation"`
}

// Key reads a sandbox's current key; ErrNotFound when it has none.
func (d *DB) Key(sandbox string) (Key, error) {
	var k Key
	err := d.db.View(func(tx *bolt.Tx) error {
		return getJSON(tx.Bucket(bucketKeys), []byte(sandbox), &k)
	})
	if err != nil {
		return Key{}, fmt.Errorf("store: key %s: %w", sandbox, err)
	}
	return k, nil
}

// Keys lists every sandbox's current key.
func (d *DB) Keys() ([]Key, error) {
	var keys []Key
	err := d.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketKeys).ForEach(func(name, _ []byte) error {
			var k Key
			if err := getJSON(tx.Bucket(bucketKeys), name, &k); err != nil {
				return err
			}
			keys = append(keys, k)
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("store: keys: %w", err)
	}
	return keys, nil
}

// ErrKeyExists reports an IssueKey for a sandbox that has a key.
var ErrKeyExists = errors.New("store: sandbox already has a key")

// IssueKey stores the first key of a sandbox, in one transaction with the
// check that it has none (ErrKeyExists otherwise).
func (d *DB) IssueKey(sandbox string, secret []byte, now time.Time) (Key, error) {
	k := Key{Sandbox: sandbox, Secret: secret, Created: now, Generation: 1}
	err := d.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketKeys)
		var old Key
		switch err := getJSON(b, []byte(sandbox), &old); {
		case err == nil:
			return ErrKeyExists
		case !errors.Is(err, ErrNotFound):
			return err
		}
		return putJSON(b, []byte(sandbox), k)
	})
	if err != nil {
		return Key{}, fmt.Errorf("store: issue key %s: %w", sandbox, err)
	}
	return k, nil
}

// ReplaceKeys stores new keys for the named sandboxes in one transaction,
// each with its generation advanced past the key it replaces. secret
// returns the new key material for a sandbox.
func (d *DB) ReplaceKeys(sandboxes []string, secret func(sandbox string) ([]byte, error), now time.Time) ([]Key, error) {
	var out []Key
	err := d.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketKeys)
		for _, name := range sandboxes {
			var old Key
			if err := getJSON(b, []byte(name), &old); err != nil && !errors.Is(err, ErrNotFound) {
				return err
			}
			s, err := secret(name)
			if err != nil {
				return err
			}
			k := Key{Sandbox: name, Secret: s, Created: now, Generation: old.Generation + 1}
			if err := putJSON(b, []byte(name), k); err != nil {
				return err
			}
			out = append(out, k)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("store: replace keys: %w", err)
	}
	return out, nil
}

// Relay states.
const (
	// RelayAccepted: the request passed its signature, freshness and nonce
	// checks and was handed to the pipeline by the server incarnation
	// Boot; it may be running, or that server may have died with it.
	RelayAccepted = "accepted"
	// RelayDone: Response is the answer, final.
	RelayDone = "done"
)

// Relay is the record of one relayed request, written (fsynced) before
// the pipeline runs it, so no request id ever runs twice.
type Relay struct {
	ID       string    `json:"id"`
	Sandbox  string    `json:"sandbox"`
	BodyHash string    `json:"body_sha256"`
	State    string    `json:"state"`
	Boot     string    `json:"boot"`
	Accepted time.Time `json:"accepted"`
	Response []byte    `json:"response,omitempty"`
}

// AcceptRelay records r as accepted, together with its nonce (kept until
// nonceExpiry), in one transaction. When a record with r's id exists it is
// returned instead, with found set, and nothing is written; when the
// sandbox has used the nonce before, ErrNonceSeen.
func (d *DB) AcceptRelay(r Relay, nonce string, nonceExpiry time.Time) (existing Relay, found bool, err error) {
	err = d.db.Update(func(tx *bolt.Tx) error {
		relays, nonces := tx.Bucket(bucketRelays), tx.Bucket(bucketNonces)
		switch err := getJSON(relays, []byte(r.ID), &existing); {
		case err == nil:
			found = true
			return nil
		case !errors.Is(err, ErrNotFound):
			return err
		}
		nk := nonceKey(r.Sandbox, nonce)
		if nonces.Get(nk) != nil {
			return ErrNonceSeen
		}
		var exp [8]byte
		binary.BigEndian.PutUint64(exp[:], uint64(nonceExpiry.UnixNano()))
		if err := nonces.Put(nk, exp[:]); err != nil {
			return err
		}
		return putJSON(relays, []byte(r.ID), r)
	})
	if err != nil && !errors.Is(err, ErrNonceSeen) {
		err = fmt.Errorf("store: accept relay %s: %w", r.ID, err)
	}
	return existing, found, err
}

// FinishRelay stores a relayed request's final answer.
func (d *DB) FinishRelay(id string, response []byte) error {
	err := d.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketRelays)
		var r Relay
		if err := getJSON(b, []byte(id), &r); err != nil {
			return err
		}
		r.State, r.Response = RelayDone, response
		return putJSON(b, []byte(id), r)
	})
	if err != nil {
		return fmt.Errorf("store: finish relay %s: %w", id, err)
	}
	return nil
}

// Relay reads a relay record; ErrNotFound when absent.
func (d *DB) Relay(id string) (Relay, error) {
	var r Relay
	err := d.db.View(func(tx *bolt.Tx) error {
		return getJSON(tx.Bucket(bucketRelays), []byte(id), &r)
	})
	if err != nil {
		return Relay{}, fmt.Errorf("store: relay %s: %w", id, err)
	}
	return r, nil
}

// pruneNonces forgets nonces that expired before now (a descriptor that
// old is refused as stale before its nonce is looked at).
func pruneNonces(tx *bolt.Tx, now time.Time) (int, error) {
	n := 0
	c := tx.Bucket(bucketNonces).Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		if len(v) == 8 && int64(binary.BigEndian.Uint64(v)) < now.UnixNano() {
			if err := c.Delete(); err != nil {
				return n, err
			}
			n++
		}
	}
	return n, nil
}

func nonceKey(sandbox, nonce string) []byte {
	return bytes.Join([][]byte{[]byte(sandbox), []byte(nonce)}, []byte{0})
}

// PruneRelays forgets the relay records accepted before `before` and the
// nonces expired at now, in one transaction, returning how many of each
// went.
func (d *DB) PruneRelays(before, now time.Time) (records, nonces int, err error) {
	err = d.db.Update(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketRelays).Cursor()
		for k, _ := c.First(); k != nil; k, _ = c.Next() {
			var r Relay
			if err := getJSON(tx.Bucket(bucketRelays), k, &r); err != nil {
				return err
			}
			if r.Accepted.Before(before) {
				if err := c.Delete(); err != nil {
					return err
				}
				records++
			}
		}
		var err error
		nonces, err = pruneNonces(tx, now)
		return err
	})
	if err != nil {
		return records, nonces, fmt.Errorf("store: prune relays: %w", err)
	}
	return records, nonces, nil
}
