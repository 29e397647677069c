package etcdstore

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"coily.dev/coily/store"
)

// ErrNotEmpty reports an Import into a trust point whose prefix already
// holds keys: a migration never mixes two states (one's lockout could be
// lost under the other's records).
var ErrNotEmpty = errors.New("etcdstore: the cluster already holds state for this trust point")

// Limits of one import transaction, below etcd's defaults (128 operations,
// 1.5 MiB a request).
const (
	importOps   = 64
	importBytes = 1 << 20
)

// Imported is what an Import wrote (or, dry, would write): counts, never
// a secret.
type Imported struct {
	store.Counts
	// ExpiredRelays are the relay records older than the store's
	// RelayKeep: a host on etcd would have forgotten them, so they are not
	// copied.
	ExpiredRelays int
	// Transactions is how many transactions wrote them.
	Transactions int
}

// Import copies a state file's shared state (store.DB.Export) into the
// store's prefix, which must hold no key at all (ErrNotEmpty otherwise).
// It first writes the migration marker, create-only into the empty prefix
// (migrating.go), so that two imports at once cannot both start and no
// host opens the prefix until the state is whole; then it writes in
// transactions, each while the marker is its own, each key created only
// where none exists (CreateRevision 0), the stop controls first; last it
// deletes the marker. An import cut off leaves the marker: the prefix is
// emptied and the import run again.
// A key that appears meanwhile fails the import (store.ErrUnavailable
// aside, an error here means: look, then start again with an empty
// prefix). Secrets are sealed with the store's seal key; relay records
// and nonces get etcd leases as AcceptRelay gives them. With dry set it
// checks the prefix and counts, and writes nothing.
func (s *Store) Import(ctx context.Context, snap store.Snapshot, now time.Time, dry bool) (Imported, error) {
	cctx, cancel := s.call(ctx)
	resp, err := s.cli.Get(cctx, s.prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	cancel()
	if err != nil {
		return Imported{}, s.fail("import", err)
	}
	if resp.Count > 0 {
		return Imported{}, fmt.Errorf("%w: %d keys under %s", ErrNotEmpty, resp.Count, s.prefix)
	}
	ops, out, err := s.importOps(ctx, snap, now, dry)
	if err != nil {
		return Imported{}, err
	}
	if dry {
		return out, nil
	}
	marker, err := s.beginMigration(ctx, now)
	if err != nil {
		return Imported{}, err
	}
	for i, batch := range batches(ops) {
		conds := make([]clientv3.Cmp, 0, len(batch)+1)
		puts := make([]clientv3.Op, 0, len(batch))
		conds = append(conds, s.ownsMigration(marker))
		for _, o := range batch {
			conds = append(conds, clientv3.Compare(clientv3.CreateRevision(o.key), "=", 0))
			puts = append(puts, o.put)
		}
		if err := s.importTxn(ctx, conds, puts, i); err != nil {
			return Imported{}, err
		}
		out.Transactions++
		if s.afterImportTxn != nil {
			if err := s.afterImportTxn(i); err != nil {
				return Imported{}, err
			}
		}
	}
	return out, s.endMigration(ctx, marker)
}

func (s *Store) importTxn(ctx context.Context, conds []clientv3.Cmp, puts []clientv3.Op, i int) error {
	cctx, cancel := s.call(ctx)
	defer cancel()
	resp, err := s.cli.Txn(cctx).If(conds...).Then(puts...).Commit()
	switch {
	case errors.Is(err, rpctypes.ErrRequestTooLarge):
		return fmt.Errorf("etcdstore: import: a record is larger than the members accept: raise their --max-request-bytes (docs/scale.md): %w", err)
	case err != nil:
		return s.fail("import", err)
	case !resp.Succeeded:
		return fmt.Errorf("etcdstore: import: keys appeared under %s meanwhile, after %d transactions: nothing more written; look, empty the prefix, import again", s.prefix, i)
	}
	return nil
}

// importOp is one key an import creates.
type importOp struct {
	key  string
	put  clientv3.Op
	size int
}

// batches cuts ops into transactions of at most importOps keys and about
// importBytes (a single larger record goes alone).
func batches(ops []importOp) [][]importOp {
	var out [][]importOp
	var cur []importOp
	size := 0
	for _, o := range ops {
		if len(cur) > 0 && (len(cur) == importOps || size+o.size > importBytes) {
			out = append(out, cur)
			cur, size = nil, 0
		}
		cur = append(cur, o)
		size += o.size
	}
	if len(cur) > 0 {
		out = append(out, cur)
	}
	return out
}

// importOps makes the puts of a snapshot, the stop controls first. Dry,
// it grants no lease.
func (s *Store) importOps(ctx context.Context, snap store.Snapshot, now time.Time, dry bool) ([]importOp, Imported, error) {
	var ops []importOp
	add := func(key string, v any, opts ...clientv3.OpOption) error {
		data, err := encode(key, v)
		if err != nil {
			return err
		}
		ops = append(ops, importOp{key: key, put: clientv3.OpPut(key, data, opts...), size: len(key) + len(data)})
		return nil
	}
	out := Imported{Counts: snap.Counts()}
	if err := s.importStops(snap.Stops, add); err != nil {
		return nil, Imported{}, err
	}
	for _, b := range snap.Rates {
		k := s.prefix + dirRates + hex.EncodeToString([]byte(b.Name))
		ops = append(ops, importOp{key: k, put: clientv3.OpPut(k, string(b.Record)), size: len(k) + len(b.Record)})
	}
	for _, k := range snap.Keys {
		key, err := s.key(dirKeys, "sandbox", k.Sandbox)
		if err != nil {
			return nil, Imported{}, err
		}
		if err := add(key, s.sealKey(k)); err != nil {
			return nil, Imported{}, err
		}
	}
	lease := func(expiry time.Time, w time.Duration) ([]clientv3.OpOption, error) {
		if dry {
			return nil, nil
		}
		id, err := s.lease(ctx, expiry, w)
		if err != nil {
			return nil, s.fail("import: lease", err)
		}
		return []clientv3.OpOption{clientv3.WithLease(id)}, nil
	}
	out.Relays = 0
	for _, r := range snap.Relays {
		if !r.Accepted.Add(s.keep).After(now) {
			out.ExpiredRelays++
			continue
		}
		key, err := s.key(dirRelays, "relay id", r.ID)
		if err != nil {
			return nil, Imported{}, err
		}
		opts, err := lease(r.Accepted.Add(s.keep), relayBucket)
		if err != nil {
			return nil, Imported{}, err
		}
		if err := add(key, r, opts...); err != nil {
			return nil, Imported{}, err
		}
		out.Relays++
	}
	for _, n := range snap.Nonces {
		sb, err := name("sandbox", n.Sandbox)
		if err != nil {
			return nil, Imported{}, err
		}
		key, err := s.key(dirNonces+sb+"/", "nonce", n.Nonce)
		if err != nil {
			return nil, Imported{}, err
		}
		opts, err := lease(n.Expiry, nonceBucket)
		if err != nil {
			return nil, Imported{}, err
		}
		if err := add(key, struct{}{}, opts...); err != nil {
			return nil, Imported{}, err
		}
	}
	for _, l := range snap.Leases {
		key, err := s.key(dirLeases, "lease id", l.ID)
		if err != nil {
			return nil, Imported{}, err
		}
		if err := add(key, l); err != nil {
			return nil, Imported{}, err
		}
	}
	return ops, out, nil
}

// importStops adds the stop controls a state file recorded: the lockout
// and the pause where it had a record, every principal's pause of itself.
func (s *Store) importStops(st store.Stops, add func(key string, v any, opts ...clientv3.OpOption) error) error {
	if st.Lockout != (store.Stop{}) {
		if err := add(s.prefix+keyLockout, st.Lockout); err != nil {
			return err
		}
	}
	if st.Pause != (store.Stop{}) {
		if err := add(s.prefix+keyPause, st.Pause); err != nil {
			return err
		}
	}
	for _, p := range sortedKeys(st.SelfPauses) {
		k, err := s.key(dirSelfPause, "principal", p)
		if err != nil {
			return err
		}
		if err := add(k, st.SelfPauses[p]); err != nil {
			return err
		}
	}
	return nil
}
