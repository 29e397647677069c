package fleet_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
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
	code := etcdtest.Main(m, 3, func(c *etcdtest.Cluster) { cluster = c })
	if built.dir != "" {
		os.RemoveAll(built.dir)
	}
	os.Exit(code)
}

// built is the coily binary coilyBinary built, once per test binary.
var built struct {
	once      sync.Once
	dir, path string
	err       error
}

// coilyBinary is the coily binary, for a test that runs `coily serve` as
// a process of its own: COILY_TEST_COILY's when set (prebuilt by
// scripts/test.sh), else built once for this test binary.
func coilyBinary(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("COILY_TEST_COILY"); p != "" {
		return p
	}
	built.once.Do(func() {
		if built.dir, built.err = os.MkdirTemp("", "coily-fleet-bin-"); built.err != nil {
			return
		}
		built.path = filepath.Join(built.dir, "coily")
		out, err := exec.Command("go", "build", "-o", built.path, "coily.dev/coily/cmd/coily").CombinedOutput()
		if err != nil {
			built.err = fmt.Errorf("go build coily: %w\n%s", err, out)
		}
	})
	if built.err != nil {
		t.Fatal(built.err)
	}
	return built.path
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
// link of its own to every member, to cut it off), stop controls and
// sync.
type host struct {
	prefix string
	store  *etcdstore.Store
	link   *etcdtest.Link
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

func (h *host) Loosened(context.Context, store.Stops, int64, bool, bool) {}

// hosts starts three hosts on a prefix of the test's own, host i talking
// to every member through its own link, member i first, each in step
// before it returns.
func hosts(t testing.TB) [3]*host {
	t.Helper()
	return hostsOn(t, nil)
}

// hostsOn is hosts with each host's stop controls persisting through
// wrap(its store) (nil: the store itself).
func hostsOn(t testing.TB, wrap func(stops.Store) stops.Store) [3]*host {
	t.Helper()
	return hostsWith(t, etcdstore.Config{}, wrap)
}

// hostsWith is hostsOn whose stores are opened with cfg's slot term and
// fence.
func hostsWith(t testing.TB, cfg etcdstore.Config, wrap func(stops.Store) stops.Store) [3]*host {
	t.Helper()
	runs.Lock()
	runs.n++
	prefix := fmt.Sprintf("/coily-test/%s/%d/", strings.ReplaceAll(t.Name(), "/", "_"), runs.n)
	runs.Unlock()
	var out [3]*host
	for i := range out {
		l, err := cluster.Link(i)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(l.Close)
		s, err := etcdstore.Open(context.Background(), etcdstore.Config{Endpoints: l.Endpoints(),
			TLS: cluster.ClientTLS(), Prefix: prefix, SealKey: sealKey, CallTimeout: 2 * time.Second,
			SlotTTL: cfg.SlotTTL, SlotFence: cfg.SlotFence})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		var persist stops.Store = s
		if wrap != nil {
			persist = wrap(s)
		}
		ctl, err := stops.New(stops.Config{Store: persist, KillGrace: 10 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ctl.Shutdown(); ctl.Wait() })
		h := &host{prefix: prefix, store: s, link: l, ctl: ctl, sync: fleet.New(fleet.Config{Store: s}), locked: make(chan lockedOut, 8)}
		h.sync.Start(ctl, h)
		t.Cleanup(h.sync.Stop)
		out[i] = h
	}
	for _, h := range out {
		waitAvailable(t, h)
	}
	return out
}
