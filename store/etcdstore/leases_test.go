package etcdstore_test

import (
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"coily.dev/coily/store"
)

func clientv3LeaseID(id int64) clientv3.LeaseID { return clientv3.LeaseID(id) }

func TestLeases(t *testing.T) {
	h := threeHosts(t)
	at := time.Date(2026, 11, 29, 9, 0, 0, 0, time.UTC)
	for _, id := range []string{"vault/b", "vault/a", "z"} {
		if err := h[0].PutLease(store.Lease{ID: id, Backend: "vault", RequestID: "r1", Acquired: at}); err != nil {
			t.Fatal(err)
		}
	}
	ls, err := h[1].Leases()
	if err != nil || len(ls) != 3 || ls[0].ID != "vault/a" || ls[1].ID != "vault/b" || ls[2].ID != "z" || !ls[0].Acquired.Equal(at) {
		t.Fatalf("Leases: %+v, %v", ls, err)
	}
	if err := h[2].DeleteLease("vault/a"); err != nil {
		t.Fatal(err)
	}
	if err := h[2].DeleteLease("never"); err != nil {
		t.Fatalf("deleting an unrecorded lease: %v", err)
	}
	if ls, _ := h[0].Leases(); len(ls) != 2 {
		t.Fatalf("after delete: %+v", ls)
	}
	if err := h[0].PutLease(store.Lease{}); err == nil {
		t.Error("a lease without an id was recorded")
	}
	// A record naming another lease than its key is refused.
	put(t, prefix(t)+"leases/x", `{"id":"y"}`)
	_, err = h[0].Leases()
	wantErr(t, err, store.ErrCorrupt)
}
