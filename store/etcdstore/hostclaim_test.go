package etcdstore_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"coily.dev/coily/store"
	"coily.dev/coily/store/etcdstore"
)

var discard = slog.New(slog.NewTextHandler(io.Discard, nil))

// openRaw opens a store on the test's prefix that the test closes itself.
func openRaw(t *testing.T) *etcdstore.Store {
	t.Helper()
	s, err := etcdstore.Open(context.Background(), etcdstore.Config{Endpoints: cluster.Endpoints(), TLS: cluster.ClientTLS(),
		Prefix: prefix(t), SealKey: sealKey})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// One name, one host: a second host claiming a name another live host
// holds is refused, told who holds it and how to go on; the first one's
// restart (its claim's lease not expired: it was killed) takes it over,
// under its own id; once a host closes (stops), another may take the
// name.
func TestHostNameClaimedOnce(t *testing.T) {
	ctx := context.Background()
	a := openRaw(t)
	defer a.Close()
	if err := a.ClaimHost(ctx, "web-1", "id-a", discard); err != nil {
		t.Fatalf("the first claim: %v", err)
	}
	b := open(t)
	err := b.ClaimHost(ctx, "web-1", "id-b", discard)
	if !errors.Is(err, etcdstore.ErrHostTaken) || !strings.Contains(err.Error(), "--host-name") || !strings.Contains(err.Error(), "pid") {
		t.Fatalf("a second host with the same name: %v, want ErrHostTaken naming the holder and the fix", err)
	}
	if err := b.ClaimHost(ctx, "web-2", "id-b", discard); err != nil {
		t.Fatalf("another name: %v", err)
	}

	// A restarted before its lease expired: the same id takes it over
	// (and the killed run's lease is revoked).
	lease := func() int64 {
		return get(t, prefix(t)+"hosts/web-1").Kvs[0].Lease
	}
	before := lease()
	a.AbandonHostClaim() // killed: its lease lives on
	again := openRaw(t)
	if err := again.ClaimHost(ctx, "web-1", "id-a", discard); err != nil {
		t.Fatalf("the same host restarted: %v", err)
	}
	if after := lease(); after == before {
		t.Fatal("the restart's claim is under the killed run's lease")
	}
	tctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if r, err := raw(t).TimeToLive(tctx, clientv3.LeaseID(before)); err != nil || r.TTL > 0 {
		t.Fatalf("the killed run's lease lives on: %+v %v", r, err)
	}
	if err := b.ClaimHost(ctx, "web-1", "id-b", discard); !errors.Is(err, etcdstore.ErrHostTaken) {
		t.Fatalf("another host after the restart: %v", err)
	}
	again.Close()
	if n := get(t, prefix(t)+"hosts/web-1", clientv3.WithCountOnly()).Count; n != 0 {
		t.Fatal("a closed host's claim stays")
	}
	c := open(t)
	if err := c.ClaimHost(ctx, "web-1", "id-c", discard); err != nil {
		t.Fatalf("a name freed by a stopped host: %v", err)
	}
}

// A host whose name another process takes while it runs (a copy of its
// state directory, with its id) admits nothing new: its Health fails
// (found in review: it only logged, and both served under one name).
func TestHostNameTakenWhileRunning(t *testing.T) {
	ctx := context.Background()
	a := openRaw(t)
	defer a.Close()
	if err := a.ClaimHost(ctx, "web-7", "id-same", discard); err != nil {
		t.Fatal(err)
	}
	if err := a.Health(ctx); err != nil {
		t.Fatalf("health with its claim: %v", err)
	}
	copied := openRaw(t)
	defer copied.Close()
	if err := copied.ClaimHost(ctx, "web-7", "id-same", discard); err != nil {
		t.Fatalf("the copy's take-over: %v", err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		err := a.Health(ctx)
		if errors.Is(err, store.ErrUnavailable) && errors.Is(err, etcdstore.ErrHostTaken) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the host whose name was taken is still healthy: %v", err)
		}
		time.Sleep(50 * time.Millisecond) // poll with a deadline
	}
}
