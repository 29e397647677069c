package etcdstore

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"coily.dev/coily/store"
)

// errNoToken ends Take's loop on a refusal, which writes nothing.
var errNoToken = errors.New("etcdstore: no token")

// Take takes one token from the bucket named key, with the arithmetic of
// store.Rate.Spend: it reads the bucket, and writes the spent one only if
// nobody wrote it since (ModRevision, or 0 for a new bucket); otherwise
// the transaction reads it again and it decides again. Of the Takes that
// read one revision, one writes: a rate holds across every host. A
// refusal writes nothing. One host's Takes of one bucket go one at a
// time, so only the hosts contend.
func (s *Store) Take(key string, r store.Rate, now time.Time) (ok bool, retryAfter time.Duration, err error) {
	if err := r.Check(key); err != nil {
		return false, 0, err
	}
	op := fmt.Sprintf("rate %q", key)
	k := s.prefix + dirRates + hex.EncodeToString([]byte(key))
	ctx, cancel := s.call(context.Background())
	defer cancel()
	h := fnv.New32a()
	h.Write([]byte(key))
	lock := s.takeLocks[h.Sum32()%uint32(len(s.takeLocks))]
	select {
	case lock <- struct{}{}:
		defer func() { <-lock }()
	case <-ctx.Done():
		return false, 0, s.fail(op, ctx.Err())
	}

	var cur []*mvccpb.KeyValue
	err = s.retryIn(ctx, op, func(ctx context.Context) error {
		if cur == nil {
			resp, err := s.cli.Get(ctx, k)
			if err != nil {
				return err
			}
			cur = resp.Kvs
		}
		var stored []byte
		rev := int64(0)
		if len(cur) == 1 {
			stored, rev = cur[0].Value, cur[0].ModRevision
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
			Then(clientv3.OpPut(k, string(next))).
			Else(clientv3.OpGet(k)).Commit()
		if err != nil {
			cur = nil
			return err
		}
		if !resp.Succeeded {
			cur = resp.Responses[0].GetResponseRange().Kvs
			if cur == nil {
				cur = []*mvccpb.KeyValue{} // deleted meanwhile: a new bucket
			}
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
