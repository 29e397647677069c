package fleet_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"coily.dev/coily/fleet"
	"coily.dev/coily/internal/etcdtest"
	"coily.dev/coily/stops"
	"coily.dev/coily/store"
	"coily.dev/coily/store/etcdstore"
)

// cluster is the package's one 3-member cluster: the tests run one at a
// time against it, each under its own prefix.
var cluster *etcdtest.Cluster

func TestMain(m *testing.M) {
	os.Exit(etcdtest.Main(m, 3, func(c *etcdtest.Cluster) { cluster = c }))
}

var sealKey = func() []byte {
	k := make([]byte, 32)
	rand.Read(k)
	return k
}()

var runs struct {
	sync.Mutex
	n int
}

// host is one coily host's part in these tests: its store (through a
// proxy of its own, to cut it off), stop controls and sync.
type host struct {
	prefix string
	store  *etcdstore.Store
	proxy  *etcdtest.Proxy
	ctl    *stops.Controls
	sync   *fleet.Sync
	locked chan lockedOut
}

type lockedOut struct {
	st     store.Stop
	rev    int64
	killed int
}

func (h *host) LockedOut(_ context.Context, st store.Stop, rev int64, killed int) {
	h.locked <- lockedOut{st, rev, killed}
}

// hosts starts three hosts on a prefix of the test's own, host i talking
// to member i through its own proxy, each in step before it returns.
func hosts(t *testing.T) [3]*host {
	t.Helper()
	runs.Lock()
	runs.n++
	prefix := fmt.Sprintf("/coily-test/%s/%d/", strings.ReplaceAll(t.Name(), "/", "_"), runs.n)
	runs.Unlock()
	var out [3]*host
	for i := range out {
		p, err := cluster.Proxy(i)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Close)
		s, err := etcdstore.Open(context.Background(), etcdstore.Config{Endpoints: []string{p.Endpoint()},
			TLS: cluster.ClientTLS(), Prefix: prefix, SealKey: sealKey, CallTimeout: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		ctl, err := stops.New(stops.Config{Store: s, KillGrace: 10 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ctl.Shutdown(); ctl.Wait() })
		h := &host{prefix: prefix, store: s, proxy: p, ctl: ctl, sync: fleet.New(fleet.Config{Store: s}), locked: make(chan lockedOut, 8)}
		h.sync.Start(ctl, h)
		t.Cleanup(h.sync.Stop)
		out[i] = h
	}
	for _, h := range out {
		waitAvailable(t, h)
	}
	return out
}
