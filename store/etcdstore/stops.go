package etcdstore

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

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

// SetLockout writes the lockout: a lockout whatever is there, an unlock
// decided on a state (st.DecidedOn) only while the lockout it lifts is
// still the one in force (loosen).
func (s *Store) SetLockout(st store.Stop) error {
	if st.Active || st.DecidedOn == nil {
		return s.put("set lockout", s.prefix+keyLockout, st)
	}
	key := s.prefix + keyLockout
	data, err := encode(key, st)
	if err != nil {
		return err
	}
	decided := st.DecidedOn.Lockout
	return s.retry("unlock", func(ctx context.Context) error {
		cur, err := s.cli.Get(ctx, key)
		if err != nil {
			return err
		}
		guard, err := s.unchanged(key, cur.Kvs, decided)
		if err != nil {
			return err
		}
		return s.commit(ctx, []clientv3.Cmp{guard}, clientv3.OpPut(key, data))
	})
}

// unchanged is the compare that the stop record kvs (at most one, read at
// key) is still what it was read as, and ErrChanged when it is active and
// not decided: another host stopped after the state the loosening was
// decided on. A record already lifted may be written over.
func (s *Store) unchanged(key string, kvs []*mvccpb.KeyValue, decided store.Stop) (clientv3.Cmp, error) {
	var cur store.Stop
	var rev int64
	if len(kvs) > 0 {
		if err := decode(key, kvs[0].Value, &cur); err != nil {
			return clientv3.Cmp{}, err
		}
		rev = kvs[0].ModRevision
	}
	if cur.Active && !sameStop(cur, decided) {
		return clientv3.Cmp{}, fmt.Errorf("%w: %s is %s's of %s, not the one this host decided on",
			store.ErrChanged, strings.TrimPrefix(key, s.prefix), cur.By, cur.Since.UTC().Format(time.RFC3339Nano))
	}
	return clientv3.Compare(clientv3.ModRevision(key), "=", rev), nil
}

// sameStop reports whether a and b are one record.
func sameStop(a, b store.Stop) bool {
	return a.Active == b.Active && a.By == b.By && a.Reason == b.Reason && a.Since.Equal(b.Since)
}

// commit runs ops if every compare holds, errConflict if one does not.
func (s *Store) commit(ctx context.Context, cmps []clientv3.Cmp, ops ...clientv3.Op) error {
	resp, err := s.cli.Txn(ctx).If(cmps...).Then(ops...).Commit()
	if err != nil {
		return err
	}
	if !resp.Succeeded {
		return errConflict
	}
	return nil
}

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
// dropped or resurrected by a stale map. A resume decided on a state
// (pause.DecidedOn) lifts only the pause and the pauses of themselves that
// state holds, as their records: one taken since is ErrChanged, and
// nothing is written.
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
		cur, err := s.cli.Get(ctx, dir, clientv3.WithPrefix())
		if err != nil {
			return err
		}
		cmps := []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(dir).WithPrefix(), "<", cur.Header.Revision+1)}
		ops := append([]clientv3.Op(nil), puts...)
		for _, kv := range cur.Kvs {
			if !want[string(kv.Key)] {
				if err := s.liftable(kv, pause.DecidedOn); err != nil {
					return err
				}
				ops = append(ops, clientv3.OpDelete(string(kv.Key)))
			}
		}
		if d := pause.DecidedOn; d != nil && !pause.Active {
			key := s.prefix + keyPause
			cp, err := s.cli.Get(ctx, key)
			if err != nil {
				return err
			}
			guard, err := s.unchanged(key, cp.Kvs, d.Pause)
			if err != nil {
				return err
			}
			cmps = append(cmps, guard)
		}
		return s.commit(ctx, cmps, ops...)
	})
}

// liftable is nil unless the pause of itself kv is one a loosening
// decided on d (nil: on nothing, unconditional) did not know: it is
// ErrChanged when d holds no such pause, or another record of it.
func (s *Store) liftable(kv *mvccpb.KeyValue, d *store.Stops) error {
	if d == nil {
		return nil
	}
	k := string(kv.Key)
	p, err := unname(s.prefix+dirSelfPause, k)
	if err != nil {
		return err
	}
	var cur store.Stop
	if err := decode(k, kv.Value, &cur); err != nil {
		return err
	}
	if cur.Active && !sameStop(cur, d.SelfPauses[p]) {
		return fmt.Errorf("%w: %s paused itself at %s, after the state this host decided on",
			store.ErrChanged, p, cur.Since.UTC().Format(time.RFC3339Nano))
	}
	return nil
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
