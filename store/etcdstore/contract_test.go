package etcdstore_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"coily.dev/coily/internal/storetest"
	"coily.dev/coily/store"
	"coily.dev/coily/store/etcdstore"
)

// counted is the etcd store as the contract sees it: its writes counted
// by the cluster's revision, which every write moves.
type counted struct {
	*etcdstore.Store
	t *testing.T
}

func (c counted) Writes(tb testing.TB) int64 {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := raw(c.t).Get(ctx, "/coily-test/revision")
	if err != nil {
		tb.Fatal(err)
	}
	return resp.Header.Revision
}

var contractRuns atomic.Int64

// The etcd store keeps the shared state's contract, as the state file
// does, each case on a prefix of its own.
func TestContract(t *testing.T) {
	storetest.Shared(t, storetest.ByLease, func(t *testing.T) store.Shared {
		p := fmt.Sprintf("%scase-%d/", prefix(t), contractRuns.Add(1))
		return counted{openCfg(t, etcdstore.Config{Prefix: p}), t}
	})
}
