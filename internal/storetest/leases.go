package storetest

import (
	"slices"
	"strings"
	"testing"
	"time"

	"coily.dev/coily/store"
)

// Leases are listed until deleted; deleting one not recorded is fine; one
// without an id is refused.
func leases(t *testing.T, open func(t *testing.T) store.Shared) {
	d := open(t)
	if got, err := d.Leases(); err != nil || len(got) != 0 {
		t.Fatalf("fresh state: %+v, %v", got, err)
	}
	now := time.Now().UTC().Truncate(time.Second)
	a := store.Lease{ID: "aws/sts/coily/AAA", Backend: "vault", RequestID: "r1", Rule: "aws", Acquired: now, Expires: now.Add(time.Hour)}
	b := store.Lease{ID: "aws/sts/coily/BBB", Backend: "vault", RequestID: "r2", Acquired: now}
	for _, l := range []store.Lease{b, a} {
		if err := d.PutLease(l); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.PutLease(store.Lease{}); err == nil {
		t.Error("a lease without an id was recorded")
	}
	list := func() []store.Lease {
		t.Helper()
		got, err := d.Leases()
		if err != nil {
			t.Fatal(err)
		}
		slices.SortFunc(got, func(x, y store.Lease) int { return strings.Compare(x.ID, y.ID) })
		return got
	}
	if got := list(); len(got) != 2 || !sameLease(got[0], a) || !sameLease(got[1], b) {
		t.Fatalf("Leases = %+v; want %+v, %+v", got, a, b)
	}
	if err := d.DeleteLease(a.ID); err != nil {
		t.Fatal(err)
	}
	if err := d.DeleteLease("never/recorded"); err != nil {
		t.Fatal(err)
	}
	if got := list(); len(got) != 1 || !sameLease(got[0], b) {
		t.Fatalf("after delete: %+v", got)
	}
}

func sameLease(x, y store.Lease) bool {
	return x.ID == y.ID && x.Backend == y.Backend && x.RequestID == y.RequestID && x.Rule == y.Rule &&
		x.Acquired.Equal(y.Acquired) && x.Expires.Equal(y.Expires)
}
