package etcdstore

import (
	"context"
	"errors"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// maxTokenRenewals bounds how many times in a row a watch is opened
// again after a stale auth token before its error is the caller's.
const maxTokenRenewals = 5

// staleToken reports whether err says only that the member a call reached
// does not know the client's auth token: a simple token expired (five
// minutes unused by default), was dropped when the user's password or
// roles changed, or was issued by another member and not yet applied on
// this one. clientv3 authenticates again and retries a unary call after
// it, but not the opening of a watch.
func staleToken(err error) bool {
	if err == nil {
		return false
	}
	for _, stale := range []error{rpctypes.ErrGRPCInvalidAuthToken, rpctypes.ErrGRPCAuthOldRevision, rpctypes.ErrGRPCUserEmpty} {
		// A watch refused at its creation carries the server's cancel
		// reason, the gRPC error's whole text, as a plain error.
		if errors.Is(rpctypes.Error(err), rpctypes.Error(stale)) || err.Error() == stale.Error() {
			return true
		}
	}
	return false
}

// watchPrefix is s.cli.Watch of every key under prefix from revision rev
// (above 0) that outlives a stale auth token: on one it reads the prefix
// once (a unary call, after which the client holds a fresh token) and
// watches again from the revision after the last event it passed on, up
// to maxTokenRenewals times in a row with a growing pause. Any other
// response, error or not, is passed on as it came.
func (s *Store) watchPrefix(ctx context.Context, prefix string, rev int64, opts ...clientv3.OpOption) clientv3.WatchChan {
	out := make(chan clientv3.WatchResponse)
	opts = append(opts, clientv3.WithPrefix())
	go func() {
		defer close(out)
		for renewals := 0; ; renewals++ {
			stale := false
			wctx, cancel := context.WithCancel(ctx)
			for wr := range s.cli.Watch(wctx, prefix, append(opts, clientv3.WithRev(rev))...) {
				if staleToken(wr.Err()) && renewals < maxTokenRenewals {
					stale = true
					break
				}
				if n := len(wr.Events); n > 0 {
					rev, renewals = wr.Events[n-1].Kv.ModRevision+1, 0
				}
				select {
				case out <- wr:
				case <-ctx.Done():
					cancel()
					return
				}
			}
			cancel()
			if !stale || !s.renewToken(ctx, prefix, renewals) {
				return
			}
		}
	}()
	return out
}

// renewToken pauses (longer after each try), then reads the count of keys
// under prefix, which makes the client authenticate again if its token is
// stale. It reports false when ctx ended.
func (s *Store) renewToken(ctx context.Context, prefix string, try int) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(time.Duration(50<<try) * time.Millisecond):
	}
	cctx, cancel := s.call(ctx)
	defer cancel()
	s.cli.Get(cctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly()) // its error is the next watch's
	return ctx.Err() == nil
}
