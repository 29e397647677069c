package etcdstore_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"coily.dev/coily/store"
)

func relay(id, sandbox string) store.Relay {
	return store.Relay{ID: id, Sandbox: sandbox, BodyHash: "h", State: store.RelayAccepted, Boot: "b1", Accepted: time.Now().UTC().Round(0)}
}

func TestRelays(t *testing.T) {
	h := threeHosts(t)
	exp := time.Now().Add(10 * time.Minute)
	r := relay("id1", "sb")
	if _, found, err := h[0].AcceptRelay(r, "n1", exp); err != nil || found {
		t.Fatalf("AcceptRelay: found %v, %v", found, err)
	}
	// The same id again: the record, nothing written.
	old, found, err := h[1].AcceptRelay(relay("id1", "sb"), "n2", exp)
	if err != nil || !found || old.Boot != "b1" || old.State != store.RelayAccepted {
		t.Fatalf("AcceptRelay again: %+v %v %v", old, found, err)
	}
	if _, _, err := h[1].AcceptRelay(relay("id2", "sb"), "n2", exp); err != nil {
		t.Fatalf("n2 was recorded by the refused accept: %v", err)
	}
	// The same nonce from the same sandbox: refused; from another: fine.
	_, _, err = h[2].AcceptRelay(relay("id3", "sb"), "n1", exp)
	wantErr(t, err, store.ErrNonceSeen)
	if _, _, err := h[2].AcceptRelay(relay("id3", "sb2"), "n1", exp); err != nil {
		t.Fatal(err)
	}
	// "a/b" + "c" and "a" + "b/c" are two nonces.
	if _, _, err := h[2].AcceptRelay(relay("id4", "a/b"), "c", exp); err != nil {
		t.Fatal(err)
	}
	if _, _, err := h[2].AcceptRelay(relay("id5", "a"), "b/c", exp); err != nil {
		t.Fatal(err)
	}

	if err := h[2].FinishRelay("id1", []byte("answer")); err != nil {
		t.Fatal(err)
	}
	got, err := h[0].Relay("id1")
	if err != nil || got.State != store.RelayDone || string(got.Response) != "answer" {
		t.Fatalf("Relay: %+v, %v", got, err)
	}
	// An answer never replaces another.
	if err := h[1].FinishRelay("id1", []byte("late")); err == nil {
		t.Fatal("a second answer was stored")
	}
	if got, _ := h[0].Relay("id1"); string(got.Response) != "answer" {
		t.Fatalf("answer now %q", got.Response)
	}
	_, err = h[0].Relay("nope")
	wantErr(t, err, store.ErrNotFound)
	wantErr(t, h[0].FinishRelay("nope", nil), store.ErrNotFound)
	if _, _, err := h[0].AcceptRelay(relay("", "sb"), "n9", exp); err == nil {
		t.Error("a relay without an id was accepted")
	}
	if n, m, err := h[0].PruneRelays(time.Now(), time.Now()); n != 0 || m != 0 || err != nil {
		t.Errorf("PruneRelays: %d %d %v", n, m, err)
	}

	// Records and nonces are under leases that end after their time.
	raw := raw(t)
	for _, k := range []string{"relays/id1", "nonces/sb/n1"} {
		kvs := get(t, prefix(t)+k).Kvs
		if len(kvs) != 1 || kvs[0].Lease == 0 {
			t.Fatalf("%s: not under a lease", k)
		}
		ttl, err := raw.TimeToLive(context.Background(), clientv3LeaseID(kvs[0].Lease))
		if err != nil {
			t.Fatal(err)
		}
		if ttl.TTL <= int64((9 * time.Minute).Seconds()) {
			t.Errorf("%s: lease ends in %ds, before the nonce expires", k, ttl.TTL)
		}
	}
}

// TestRelayCorrupt: an unreadable record is ErrCorrupt, also when an
// accept finds it.
func TestRelayCorrupt(t *testing.T) {
	s := open(t)
	put(t, prefix(t)+"relays/bad", "null")
	_, err := s.Relay("bad")
	wantErr(t, err, store.ErrCorrupt)
	_, _, err = s.AcceptRelay(relay("bad", "sb"), "n", time.Now().Add(time.Minute))
	wantErr(t, err, store.ErrCorrupt)
	wantErr(t, s.FinishRelay("bad", nil), store.ErrCorrupt)
}

// TestNonceOnceAcrossHosts: 300 nonces, each tried by 3 hosts at once on
// 3 members: each accepted exactly once.
func TestNonceOnceAcrossHosts(t *testing.T) {
	h := threeHosts(t)
	exp := time.Now().Add(10 * time.Minute)
	var accepted, seen atomic.Int32
	sem := make(chan struct{}, 30)
	var wg sync.WaitGroup
	for n := range 300 {
		for i, s := range h {
			sem <- struct{}{}
			wg.Go(func() {
				defer func() { <-sem }()
				_, found, err := s.AcceptRelay(relay(fmt.Sprintf("h%d-%d", i, n), "sb"), fmt.Sprint("n", n), exp)
				switch {
				case errors.Is(err, store.ErrNonceSeen):
					seen.Add(1)
				case err != nil || found:
					t.Error(found, err)
				default:
					accepted.Add(1)
				}
			})
		}
	}
	wg.Wait()
	if accepted.Load() != 300 || seen.Load() != 600 {
		t.Fatalf("%d accepted, %d refused: want 300 and 600", accepted.Load(), seen.Load())
	}
}

// TestRelayLeaseGone: a bucket's lease revoked behind the store's back
// (or expired while a host's clock ran behind) is granted anew, and the
// accept goes through.
func TestRelayLeaseGone(t *testing.T) {
	s := open(t)
	exp := time.Now().Add(10 * time.Minute)
	if _, _, err := s.AcceptRelay(relay("id1", "sb"), "n1", exp); err != nil {
		t.Fatal(err)
	}
	kv := get(t, prefix(t)+"nonces/sb/n1").Kvs[0]
	if _, err := raw(t).Revoke(context.Background(), clientv3LeaseID(kv.Lease)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.AcceptRelay(relay("id2", "sb"), "n2", exp); err != nil {
		t.Fatalf("accept after the lease went: %v", err)
	}
	if kvs := get(t, prefix(t)+"nonces/sb/n2").Kvs; len(kvs) != 1 || kvs[0].Lease == kv.Lease {
		t.Fatal("the nonce is not under a new lease")
	}
}
