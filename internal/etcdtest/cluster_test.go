package etcdtest_test

import (
	"context"
	"errors"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
	"go.uber.org/zap"

	"coily.dev/coily/internal/etcdtest"
	"coily.dev/coily/internal/poll"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, etcdtest.IgnoreLeaks()...) }

func client(t *testing.T, c *etcdtest.Cluster, eps ...string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: eps, TLS: c.ClientTLS(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// TestCluster: three members agree, one proxied client can be cut off and
// healed, and a client without a certificate is refused.
func TestCluster(t *testing.T) {
	start := time.Now()
	c := etcdtest.Start(t, 3, etcdtest.Options{})
	t.Logf("3 members ready in %v", time.Since(start).Round(time.Millisecond))
	if c.Leader() < 0 {
		t.Fatal("no leader")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := client(t, c, c.Endpoint(0)).Put(ctx, "k", "v"); err != nil {
		t.Fatal(err)
	}
	if r, err := client(t, c, c.Endpoint(2)).Get(ctx, "k"); err != nil || len(r.Kvs) != 1 {
		t.Fatalf("get on another member: %v %v", r, err)
	}

	p, err := c.Proxy(1)
	if err != nil {
		t.Fatal(err)
	}
	via := client(t, c, p.Endpoint())
	if _, err := via.Get(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	p.Cut()
	short, cancelShort := context.WithTimeout(context.Background(), time.Second)
	defer cancelShort()
	if _, err := via.Get(short, "k"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a get through a cut proxy: %v", err)
	}
	p.Heal()
	if _, err := via.Get(ctx, "k"); err != nil {
		t.Fatalf("after heal: %v", err)
	}
	// Blackholed, a connection stays open and silent; healed, it goes on.
	p.Blackhole()
	short2, cancelShort2 := context.WithTimeout(context.Background(), time.Second)
	defer cancelShort2()
	if _, err := via.Get(short2, "k"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a get through a blackholed proxy: %v", err)
	}
	p.Heal()
	if _, err := via.Get(ctx, "k"); err != nil {
		t.Fatalf("after the blackhole healed: %v", err)
	}

	cli, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints(), TLS: c.ServerOnlyTLS(), DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err == nil {
		defer cli.Close()
		bare, cancelBare := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancelBare()
		if _, err := cli.Get(bare, "k"); err == nil {
			t.Fatal("a client without a certificate read the cluster")
		}
	}

	// The leader stopped: the others elect one, and a client linked to
	// every member, the stopped one first, goes on; cut, it is refused;
	// restarted, the member rejoins.
	l := c.Leader()
	link, err := c.Link(l)
	if err != nil {
		t.Fatal(err)
	}
	linked := client(t, c, link.Endpoints()...)
	c.Stop(l)
	poll.Until(t, 30*time.Second, "a new leader", func() bool { return c.Leader() >= 0 && c.Leader() != l })
	if _, err := linked.Put(ctx, "k2", "v"); err != nil {
		t.Fatalf("a put through a link with a member down: %v", err)
	}
	link.Cut()
	short3, cancelShort3 := context.WithTimeout(context.Background(), time.Second)
	defer cancelShort3()
	if _, err := linked.Get(short3, "k2"); err == nil {
		t.Fatal("a get through a cut link")
	}
	link.Heal()
	if err := c.Restart(l); err != nil {
		t.Fatal(err)
	}
	if err := c.Restart(l); err == nil {
		t.Fatal("a running member restarted")
	}
	if r, err := client(t, c, c.Endpoint(l)).Get(ctx, "k"); err != nil || len(r.Kvs) != 1 {
		t.Fatalf("get on the restarted member: %v %v", r, err)
	}
}
