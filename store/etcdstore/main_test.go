package etcdstore_test

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"coily.dev/coily/internal/etcdtest"
	"coily.dev/coily/store/etcdstore"
)

// cluster is the package's one 3-member cluster: the tests run one at a
// time against it, each under its own prefix.
var cluster *etcdtest.Cluster

func TestMain(m *testing.M) {
	os.Exit(etcdtest.Main(m, 3, func(c *etcdtest.Cluster) { cluster = c }))
}

// sealKey is the tests' seal key (each test process makes its own).
var sealKey = func() []byte {
	k := make([]byte, 32)
	rand.Read(k)
	return k
}()

var (
	prefixMu sync.Mutex
	prefixes = map[*testing.T]string{}
)

// prefix is the test's own prefix, so tests share the cluster without
// seeing each other's keys (a run of -count=2 included).
func prefix(t *testing.T) string {
	prefixMu.Lock()
	defer prefixMu.Unlock()
	if p, ok := prefixes[t]; ok {
		return p
	}
	p := fmt.Sprintf("/coily-test/%s/%d/", strings.NewReplacer("/", "_", " ", "_").Replace(t.Name()), len(prefixes))
	prefixes[t] = p
	return p
}

// open opens a store on the test's prefix through the given endpoints
// (every member when none).
func open(t *testing.T, endpoints ...string) *etcdstore.Store {
	t.Helper()
	return openCfg(t, etcdstore.Config{Endpoints: endpoints})
}

func openCfg(t *testing.T, cfg etcdstore.Config) *etcdstore.Store {
	t.Helper()
	if len(cfg.Endpoints) == 0 {
		cfg.Endpoints = cluster.Endpoints()
	}
	if cfg.TLS == nil {
		cfg.TLS = cluster.ClientTLS()
	}
	if cfg.Prefix == "" {
		cfg.Prefix = prefix(t)
	}
	if cfg.SealKey == nil {
		cfg.SealKey = sealKey
	}
	s, err := etcdstore.Open(context.Background(), cfg)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// threeHosts opens three stores on the test's prefix, each talking to a
// different member, as three coily hosts would.
func threeHosts(t *testing.T) [3]*etcdstore.Store {
	var out [3]*etcdstore.Store
	for i := range out {
		out[i] = open(t, cluster.Endpoint(i))
	}
	return out
}

// raw is a plain etcd client of the cluster, to read and write what the
// store keeps as it is stored.
func raw(t *testing.T) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: cluster.Endpoints(), TLS: cluster.ClientTLS(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

func put(t *testing.T, key, value string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := raw(t).Put(ctx, key, value); err != nil {
		t.Fatal(err)
	}
}

func get(t *testing.T, key string, opts ...clientv3.OpOption) *clientv3.GetResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := raw(t).Get(ctx, key, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func wantErr(t *testing.T, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("error %v, want %v", err, want)
	}
}
