package etcdstore

import (
	"context"
	"errors"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"coily.dev/coily/store"
)

// StopsEvent is the stop controls as they stood at revision Rev, after a
// change, or Err: the watch has ended (Err wraps store.ErrUnavailable
// when the cluster was lost) and the channel closes after it. A watcher
// then reads StopsAt again and watches from there.
type StopsEvent struct {
	Stops store.Stops
	Rev   int64
	Err   error
}

// Watch sends the stop controls after every change to them from revision
// fromRev on (StopsAt's revision + 1 to miss nothing), each read whole at
// the revision of the change, until ctx ends. A watch that falls behind
// etcd's compaction sends the controls as they stand now, never skips
// silently. It requires a leader: a member cut from its quorum ends the
// watch with an error. A lost connection is not an error here: the client
// dials again and resumes where it stopped, so whether the cluster is
// reachable is Health's to tell.
func (s *Store) Watch(ctx context.Context, fromRev int64) <-chan StopsEvent {
	out := make(chan StopsEvent, 1)
	go func() {
		defer close(out)
		send := func(ev StopsEvent) bool {
			select {
			case out <- ev:
				return true
			case <-ctx.Done():
				return false
			}
		}
		rev := fromRev
		for {
			next, err := s.watchFrom(ctx, rev, send)
			if err != nil {
				if ctx.Err() == nil {
					send(StopsEvent{Err: err})
				}
				return
			}
			rev = next
		}
	}()
	return out
}

// watchFrom watches the stop keys from revision rev, sending the controls
// after each change, until ctx ends or the watch fails. A watch compacted
// away sends the controls as they stand now and returns the revision to
// watch again from.
func (s *Store) watchFrom(ctx context.Context, rev int64, send func(StopsEvent) bool) (next int64, err error) {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	for wr := range s.watchPrefix(wctx, s.prefix+dirStops, rev) {
		at := int64(0) // now, after a compaction
		switch err := wr.Err(); {
		case errors.Is(err, rpctypes.ErrCompacted):
		case err != nil:
			return 0, s.fail("watch stops", err)
		case len(wr.Events) == 0:
			continue // a progress notification
		default:
			at = wr.Events[len(wr.Events)-1].Kv.ModRevision
		}
		ev, err := s.stopsAt(ctx, at)
		if errors.Is(err, rpctypes.ErrCompacted) {
			ev, err = s.stopsAt(ctx, 0)
		}
		if err != nil {
			return 0, err
		}
		if !send(ev) {
			return 0, ctx.Err()
		}
		if at == 0 {
			return ev.Rev + 1, nil
		}
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	return 0, s.fail("watch stops", errors.New("watch closed"))
}

// stopsAt reads the stop controls at revision rev (0: now).
func (s *Store) stopsAt(ctx context.Context, rev int64) (StopsEvent, error) {
	cctx, cancel := s.call(ctx)
	defer cancel()
	var opts []clientv3.OpOption
	opts = append(opts, clientv3.WithPrefix())
	if rev != 0 {
		opts = append(opts, clientv3.WithRev(rev))
	}
	resp, err := s.cli.Get(cctx, s.prefix+dirStops, opts...)
	if err != nil {
		return StopsEvent{}, s.fail("stops", err)
	}
	st, err := s.parseStops(resp.Kvs)
	if err != nil {
		return StopsEvent{}, err
	}
	if rev == 0 {
		rev = resp.Header.Revision
	}
	return StopsEvent{Stops: st, Rev: rev}, nil
}
