package etcdstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"coily.dev/coily/store"
)

// Lease buckets: records expire with etcd leases, one lease per interval
// of expiry times, so a busy relay holds a few dozen leases, not one per
// record. A record lives until the end of its expiry's bucket plus
// leaseGrace (which absorbs the clocks of hosts running a little behind:
// a nonce must outlive every host's view of its descriptor's freshness).
const (
	nonceBucket = time.Minute
	relayBucket = time.Hour
	leaseGrace  = 2 * time.Minute
)

// AcceptRelay records r as accepted together with its nonce, kept until
// nonceExpiry, in one transaction that requires both to be new. When r's
// id has a record it is returned, with found set, and nothing is written;
// when the sandbox has used the nonce before, store.ErrNonceSeen. Of
// several hosts accepting one id or one nonce at once, one does.
func (s *Store) AcceptRelay(r store.Relay, nonce string, nonceExpiry time.Time) (existing store.Relay, found bool, err error) {
	rk, err := s.key(dirRelays, "relay id", r.ID)
	if err != nil {
		return store.Relay{}, false, err
	}
	sb, err := name("sandbox", r.Sandbox)
	if err != nil {
		return store.Relay{}, false, err
	}
	nk, err := s.key(dirNonces+sb+"/", "nonce", nonce)
	if err != nil {
		return store.Relay{}, false, err
	}
	v, err := encode(rk, r)
	if err != nil {
		return store.Relay{}, false, err
	}
	err = s.retry("accept relay "+r.ID, func(ctx context.Context) error {
		relayLease, err := s.lease(ctx, r.Accepted.Add(s.keep), relayBucket)
		if err != nil {
			return err
		}
		nonceLease, err := s.lease(ctx, nonceExpiry, nonceBucket)
		if err != nil {
			return err
		}
		resp, err := s.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(rk), "=", 0), clientv3.Compare(clientv3.CreateRevision(nk), "=", 0)).
			Then(clientv3.OpPut(rk, v, clientv3.WithLease(relayLease)), clientv3.OpPut(nk, "{}", clientv3.WithLease(nonceLease))).
			Else(clientv3.OpGet(rk), clientv3.OpGet(nk, clientv3.WithCountOnly())).Commit()
		if errors.Is(err, rpctypes.ErrLeaseNotFound) {
			s.forgetLeases(relayLease, nonceLease)
			return errConflict
		}
		if err != nil || resp.Succeeded {
			return err
		}
		if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) == 1 {
			found = true
			return decode(rk, kvs[0].Value, &existing)
		}
		if resp.Responses[1].GetResponseRange().Count > 0 {
			return store.ErrNonceSeen
		}
		return errConflict // both went between the compare and the read: read again
	})
	if errors.Is(err, store.ErrNonceSeen) {
		return store.Relay{}, false, store.ErrNonceSeen
	}
	if err != nil {
		return store.Relay{}, false, err
	}
	return existing, found, nil
}

// FinishRelay stores a relayed request's final answer, only over the
// record as accepted: an answer never replaces another (a late answer
// after its interruption was recorded, or the reverse, is refused).
func (s *Store) FinishRelay(id string, response []byte) error {
	rk, err := s.key(dirRelays, "relay id", id)
	if err != nil {
		return err
	}
	return s.retry("finish relay "+id, func(ctx context.Context) error {
		cur, err := s.cli.Get(ctx, rk)
		if err != nil {
			return err
		}
		if len(cur.Kvs) == 0 {
			return store.ErrNotFound
		}
		var r store.Relay
		if err := decode(rk, cur.Kvs[0].Value, &r); err != nil {
			return err
		}
		if r.State != store.RelayAccepted {
			return fmt.Errorf("%w: state %q, not %q", errFinished, r.State, store.RelayAccepted)
		}
		r.State, r.Response = store.RelayDone, response
		v, err := encode(rk, r)
		if err != nil {
			return err
		}
		resp, err := s.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.ModRevision(rk), "=", cur.Kvs[0].ModRevision)).
			Then(clientv3.OpPut(rk, v, clientv3.WithIgnoreLease())).Commit()
		if err != nil {
			return err
		}
		if !resp.Succeeded {
			return errConflict
		}
		return nil
	})
}

// errFinished reports a FinishRelay over a record already answered.
var errFinished = errors.New("etcdstore: relay already answered")

// Relay reads a relay record; store.ErrNotFound when absent.
func (s *Store) Relay(id string) (store.Relay, error) {
	rk, err := s.key(dirRelays, "relay id", id)
	if err != nil {
		return store.Relay{}, err
	}
	ctx, cancel := s.call(context.Background())
	defer cancel()
	resp, err := s.cli.Get(ctx, rk)
	if err != nil {
		return store.Relay{}, s.fail("relay "+id, err)
	}
	if len(resp.Kvs) == 0 {
		return store.Relay{}, fmt.Errorf("etcdstore: relay %s: %w", id, store.ErrNotFound)
	}
	var r store.Relay
	if err := decode(rk, resp.Kvs[0].Value, &r); err != nil {
		return store.Relay{}, err
	}
	return r, nil
}

// PruneRelays does nothing: records and nonces expire with their leases.
func (s *Store) PruneRelays(before, now time.Time) (records, nonces int, err error) {
	return 0, 0, nil
}

// lease returns the lease of the bucket of width w that holds expiry,
// granting it (TTL to the bucket's end plus leaseGrace) the first time.
func (s *Store) lease(ctx context.Context, expiry time.Time, w time.Duration) (clientv3.LeaseID, error) {
	end := expiry.Truncate(w).Add(w)
	s.leaseMu.Lock()
	defer s.leaseMu.Unlock()
	now := time.Now()
	for e := range s.leases {
		if time.Unix(e, 0).Before(now) {
			delete(s.leases, e)
		}
	}
	if id, ok := s.leases[end.Unix()]; ok {
		return id, nil
	}
	ttl := int64(time.Until(end.Add(leaseGrace)).Seconds()) + 1
	resp, err := s.cli.Grant(ctx, max(ttl, 1))
	if err != nil {
		return 0, err
	}
	s.leases[end.Unix()] = resp.ID
	return resp.ID, nil
}

// forgetLeases drops leases etcd no longer has (revoked, or expired while
// a host's clock ran behind) so the next call grants them anew.
func (s *Store) forgetLeases(ids ...clientv3.LeaseID) {
	s.leaseMu.Lock()
	defer s.leaseMu.Unlock()
	for e, id := range s.leases {
		for _, x := range ids {
			if id == x {
				delete(s.leases, e)
			}
		}
	}
}
