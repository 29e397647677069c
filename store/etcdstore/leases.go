package etcdstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	"coily.dev/coily/store"
)

// PutLease records a dynamic-secret lease in use.
func (s *Store) PutLease(l store.Lease) error {
	if l.ID == "" {
		return errors.New("etcdstore: lease without id")
	}
	k, err := s.key(dirLeases, "lease id", l.ID)
	if err != nil {
		return err
	}
	return s.put("put lease "+l.ID, k, l)
}

// DeleteLease forgets a lease (revoked). Forgetting one not recorded is
// not an error.
func (s *Store) DeleteLease(id string) error {
	k, err := s.key(dirLeases, "lease id", id)
	if err != nil {
		return err
	}
	ctx, cancel := s.call(context.Background())
	defer cancel()
	if _, err := s.cli.Delete(ctx, k); err != nil {
		return s.fail("delete lease "+id, err)
	}
	return nil
}

// Leases returns every lease recorded, in id order. A record that cannot
// be decoded, or names another lease than its key, is ErrCorrupt: a lease
// must not be skipped silently.
func (s *Store) Leases() ([]store.Lease, error) {
	ctx, cancel := s.call(context.Background())
	defer cancel()
	resp, err := s.cli.Get(ctx, s.prefix+dirLeases, clientv3.WithPrefix())
	if err != nil {
		return nil, s.fail("leases", err)
	}
	var out []store.Lease
	for _, kv := range resp.Kvs {
		id, err := unname(s.prefix+dirLeases, string(kv.Key))
		if err != nil {
			return nil, err
		}
		var l store.Lease
		if err := decode(string(kv.Key), kv.Value, &l); err != nil {
			return nil, err
		}
		if l.ID != id {
			return nil, fmt.Errorf("%w: lease record %q names lease %q", store.ErrCorrupt, id, l.ID)
		}
		out = append(out, l)
	}
	slices.SortFunc(out, func(a, b store.Lease) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}
