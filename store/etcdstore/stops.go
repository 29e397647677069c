package etcdstore

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"coily.dev/coily/store"
)

// Stops reads every stop control in one linearizable read. A missing
// record is an inactive stop; an unreadable one is ErrCorrupt.
func (s *Store) Stops() (store.Stops, error) {
	st, _, err := s.StopsAt()
	return st, err
}

// StopsAt is Stops with the revision it was read at, to watch from.
func (s *Store) StopsAt() (store.Stops, int64, error) {
	ctx, cancel := s.call(context.Background())
	defer cancel()
	resp, err := s.cli.Get(ctx, s.prefix+dirStops, clientv3.WithPrefix())
	if err != nil {
		return store.Stops{}, 0, s.fail("stops", err)
	}
	st, err := s.parseStops(resp.Kvs)
	if err != nil {
		return store.Stops{}, 0, err
	}
	return st, resp.Header.Revision, nil
}

// parseStops reads the stop controls from the keys under stops/. A key
// there that is none of them is ErrCorrupt: nothing else writes there.
func (s *Store) parseStops(kvs []*mvccpb.KeyValue) (store.Stops, error) {
	var st store.Stops
	for _, kv := range kvs {
		k := string(kv.Key)
		switch {
		case k == s.prefix+keyLockout:
			if err := decode(k, kv.Value, &st.Lockout); err != nil {
				return store.Stops{}, err
			}
		case k == s.prefix+keyPause:
			if err := decode(k, kv.Value, &st.Pause); err != nil {
				return store.Stops{}, err
			}
		case strings.HasPrefix(k, s.prefix+dirSelfPause):
			p, err := unname(s.prefix+dirSelfPause, k)
			if err != nil {
				return store.Stops{}, err
			}
			var one store.Stop
			if err := decode(k, kv.Value, &one); err != nil {
				return store.Stops{}, err
			}
			if st.SelfPauses == nil {
				st.SelfPauses = map[string]store.Stop{}
			}
			st.SelfPauses[p] = one
		default:
			return store.Stops{}, fmt.Errorf("%w: unknown stop record %q", store.ErrCorrupt, k)
		}
	}
	return st, nil
}

// SetLockout writes the lockout.
func (s *Store) SetLockout(st store.Stop) error { return s.put("set lockout", s.prefix+keyLockout, st) }

// SetPause writes the server's pause.
func (s *Store) SetPause(st store.Stop) error { return s.put("set pause", s.prefix+keyPause, st) }

// SetSelfPause writes one principal's pause of itself (its own key: the
// others' are not touched).
func (s *Store) SetSelfPause(principal string, st store.Stop) error {
	k, err := s.key(dirSelfPause, "principal", principal)
	if err != nil {
		return err
	}
	return s.put("set self-pause", k, st)
}

// SetPauses replaces the server's pause and every principal's pause of
// itself in one transaction, guarded by the self-pauses it read: one set
// meanwhile (on another host) makes it read and decide again, so none is
// dropped or resurrected by a stale map.
func (s *Store) SetPauses(pause store.Stop, self map[string]store.Stop) error {
	pv, err := encode(keyPause, pause)
	if err != nil {
		return err
	}
	puts := []clientv3.Op{clientv3.OpPut(s.prefix+keyPause, pv)}
	want := map[string]bool{}
	for _, p := range sortedKeys(self) {
		k, err := s.key(dirSelfPause, "principal", p)
		if err != nil {
			return err
		}
		v, err := encode(k, self[p])
		if err != nil {
			return err
		}
		puts = append(puts, clientv3.OpPut(k, v))
		want[k] = true
	}
	return s.retry("set pauses", func(ctx context.Context) error {
		dir := s.prefix + dirSelfPause
		cur, err := s.cli.Get(ctx, dir, clientv3.WithPrefix(), clientv3.WithKeysOnly())
		if err != nil {
			return err
		}
		ops := append([]clientv3.Op(nil), puts...)
		for _, kv := range cur.Kvs {
			if !want[string(kv.Key)] {
				ops = append(ops, clientv3.OpDelete(string(kv.Key)))
			}
		}
		resp, err := s.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.ModRevision(dir).WithPrefix(), "<", cur.Header.Revision+1)).
			Then(ops...).Commit()
		if err != nil {
			return err
		}
		if !resp.Succeeded {
			return errConflict
		}
		return nil
	})
}

func sortedKeys(m map[string]store.Stop) []string { return slices.Sorted(maps.Keys(m)) }

func (s *Store) put(op, key string, v any) error {
	data, err := encode(key, v)
	if err != nil {
		return err
	}
	ctx, cancel := s.call(context.Background())
	defer cancel()
	if _, err := s.cli.Put(ctx, key, data); err != nil {
		return s.fail(op, err)
	}
	return nil
}
