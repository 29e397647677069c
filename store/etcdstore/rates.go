package etcdstore

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"coily.dev/coily/store"
)

// errNoToken ends Take's loop on a refusal, which writes nothing.
var errNoToken = errors.New("etcdstore: no token")

// Take takes one token from the bucket named key, with the arithmetic of
// store.Rate.Spend: it reads the bucket, and writes the spent one only if
// nobody wrote it since (ModRevision, or CreateRevision 0 for a new
// bucket); otherwise it reads again. Of the Takes that read one revision,
// one writes: a rate holds across every host. A refusal writes nothing.
func (s *Store) Take(key string, r store.Rate, now time.Time) (ok bool, retryAfter time.Duration, err error) {
	if err := r.Check(key); err != nil {
		return false, 0, err
	}
	k := s.prefix + dirRates + hex.EncodeToString([]byte(key))
	err = s.retry(fmt.Sprintf("rate %q", key), func(ctx context.Context) error {
		cur, err := s.cli.Get(ctx, k)
		if err != nil {
			return err
		}
		var stored []byte
		rev := int64(0)
		if len(cur.Kvs) == 1 {
			stored, rev = cur.Kvs[0].Value, cur.Kvs[0].ModRevision
			if stored == nil {
				stored = []byte{} // an empty value is a record, and not a valid one
			}
		}
		next, took, wait, err := r.Spend(stored, now)
		if err != nil {
			return err
		}
		if !took {
			retryAfter = wait
			return errNoToken
		}
		resp, err := s.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.ModRevision(k), "=", rev)).
			Then(clientv3.OpPut(k, string(next))).Commit()
		if err != nil {
			return err
		}
		if !resp.Succeeded {
			return errConflict
		}
		return nil
	})
	switch {
	case errors.Is(err, errNoToken):
		return false, retryAfter, nil
	case err != nil:
		return false, 0, err
	}
	return true, 0, nil
}
