package fleet_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"coily.dev/coily/audit"
	"coily.dev/coily/fleet/auditship"
	"coily.dev/coily/internal/poll"
	"coily.dev/coily/internal/testserver"
	"coily.dev/coily/store"
	"coily.dev/coily/store/etcdstore"
)

// auditServers starts three servers named h0, h1, h2 in their audit
// records, each shipping its log.
func auditServers(t *testing.T) ([3]*node, [3]*auditship.Shipper) {
	t.Helper()
	ns := serversWith(t, testserver.Options{}, etcdstore.Config{}, func(i int, o *testserver.Options) { o.AuditHost = fmt.Sprint("h", i) })
	var sh [3]*auditship.Shipper
	for i, n := range ns {
		sh[i] = startShipper(t, n)
	}
	return ns, sh
}

func startShipper(t *testing.T, n *node) *auditship.Shipper {
	t.Helper()
	s, err := auditship.Start(auditship.Config{Store: n.store, Log: n.Audit, Host: n.host(), Interval: 20 * time.Millisecond, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}

func (n *node) host() string {
	r, err := n.Audit.Tail(1)
	if err != nil || len(r) == 0 {
		panic(fmt.Sprint("no record to name the host: ", err))
	}
	return r[0].Host
}

// fleetTail is every record the fleet's view holds (as `coily audit tail
// --fleet` reads it), through n's store.
func fleetTail(t *testing.T, n *node) ([]audit.Record, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	v, err := auditship.Tail(ctx, n.store, 100000, nil)
	return v.Records, err
}

// shippedAll reports whether recs hold every record of each node's log,
// once each, in seq order for each host: no gap, no duplicate.
func shippedAll(recs []audit.Record, ns ...*node) bool {
	for _, n := range ns {
		var seqs []uint64
		for _, r := range recs {
			if r.Host == n.host() {
				seqs = append(seqs, r.Seq)
			}
		}
		slices.Sort(seqs)
		want := n.Audit.Head().Seq
		if uint64(len(seqs)) != want {
			return false
		}
		for i, s := range seqs {
			if s != uint64(i+1) {
				return false
			}
		}
	}
	return true
}

// Three servers on one cluster each run an Exec: the fleet's view read
// through any host holds every host's records, each naming its host,
// merged by time; the console's feed of any host has them as backlog and
// then each new record of every host as it is shipped.
func TestFleetAuditView(t *testing.T) {
	ns, _ := auditServers(t)
	for _, n := range ns {
		if err := n.exec("/bin/true"); err != nil {
			t.Fatal(err)
		}
	}
	for _, reader := range ns {
		var recs []audit.Record
		poll.Until(t, within, "every host's records in the view", func() bool {
			var err error
			recs, err = fleetTail(t, reader)
			if err != nil {
				t.Fatal(err)
			}
			return shippedAll(recs, ns[:]...)
		})
		for i, r := range recs {
			if i > 0 && r.Time.Before(recs[i-1].Time) {
				t.Fatalf("record %s of %s before the one ahead of it", r.ID, r.Host)
			}
		}
		for _, n := range ns {
			if !slices.ContainsFunc(recs, func(r audit.Record) bool { return r.Host == n.host() && r.Event == "exec.result" }) {
				t.Fatalf("no exec record of %s", n.host())
			}
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st, err := auditship.Feed{Store: ns[1].store}.Subscribe(ctx, 500)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if !st.Fleet || !shippedAll(st.Backlog, ns[:]...) {
		t.Fatalf("the console's backlog: %d records, fleet %v", len(st.Backlog), st.Fleet)
	}
	if err := ns[2].exec("/bin/true"); err != nil {
		t.Fatal(err)
	}
	if err := ns[0].exec("/bin/true"); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	deadline := time.After(within)
	for !seen["h0"] || !seen["h2"] {
		select {
		case r, ok := <-st.Live:
			if !ok {
				t.Fatal("the console's feed ended")
			}
			if r.Event == "exec.result" {
				seen[r.Host] = true
			}
		case <-deadline:
			t.Fatalf("the console's feed had only %v", seen)
		}
	}
}

// A shipper stopped (a restart) resumes after the last record etcd holds:
// no gap, no duplicate; a host cut from etcd audits on (its refusals) and
// ships that backlog once back.
func TestAuditShipResumesAndCatchesUp(t *testing.T) {
	ns, sh := auditServers(t)
	sh[0].Stop()
	for range 3 {
		if err := ns[0].exec("/bin/true"); err != nil {
			t.Fatal(err)
		}
	}
	startShipper(t, ns[0])
	ns[2].link.Cut()
	poll.Until(t, within, "the cut host refuses", func() bool {
		return codeOf(ns[2].exec("/bin/true")) == "state-unavailable"
	})
	for range 3 {
		if err := ns[2].exec("/bin/true"); codeOf(err) != "state-unavailable" {
			t.Fatalf("exec on the cut host: %v", err)
		}
	}
	cutAt := ns[2].Audit.Head().Seq
	ns[2].link.Heal()
	poll.Until(t, within, "every record of every host shipped once", func() bool {
		recs, err := fleetTail(t, ns[1])
		if err != nil {
			t.Fatal(err)
		}
		return shippedAll(recs, ns[:]...) && ns[2].Audit.Head().Seq >= cutAt
	})
	for i, s := range sh {
		if _, err := s.Shipped(); err != nil {
			t.Fatalf("shipper %d stopped: %v", i, err)
		}
	}
}

// A record forged under another host's key (h1's record where h0's next
// would go) is refused by every reader, and the shipper of h0, reaching
// it, stops rather than mix two chains under one name.
func TestAuditForgedRecordRefused(t *testing.T) {
	ns, sh := auditServers(t)
	poll.Until(t, within, "shipped", func() bool {
		recs, err := fleetTail(t, ns[0])
		return err == nil && shippedAll(recs, ns[:]...)
	})
	h1, err := ns[1].Audit.Tail(1)
	if err != nil {
		t.Fatal(err)
	}
	line, err := auditLine(ns[1], h1[0].Seq)
	if err != nil {
		t.Fatal(err)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: cluster.Endpoints(), TLS: cluster.ClientTLS(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	next := ns[0].Audit.Head().Seq + 1
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := cli.Put(ctx, fmt.Sprintf("%saudit/h0/%020d", ns[0].prefix, next), string(line)); err != nil {
		t.Fatal(err)
	}
	for _, n := range ns {
		if _, err := fleetTail(t, n); !errors.Is(err, store.ErrCorrupt) {
			t.Fatalf("the view through %s: %v, want ErrCorrupt", n.host(), err)
		}
	}
	if err := ns[0].exec("/bin/true"); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, within, "h0's shipper stops at the forged record", func() bool {
		_, err := sh[0].Shipped()
		return errors.Is(err, store.ErrCorrupt)
	})
}

// auditLine is the line of n's log holding record seq.
func auditLine(n *node, seq uint64) ([]byte, error) {
	var out []byte
	err := audit.NewFollower(n.Audit.Dir(), seq-1).ReadNew(func(r audit.Record, line []byte) error {
		if r.Seq == seq {
			out = append([]byte(nil), line...)
		}
		return nil
	})
	return out, err
}
