package etcdstore_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"coily.dev/coily/audit"
	"coily.dev/coily/store"
	"coily.dev/coily/store/etcdstore"
)

// shipLines writes n records to a new log of host and returns them as
// ShipAudit takes them.
func shipLines(t *testing.T, host string, n int) []etcdstore.AuditLine {
	t.Helper()
	l, err := audit.Open(audit.Config{Dir: t.TempDir(), Host: host})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for i := range n {
		if _, err := l.Append(context.Background(), audit.Record{Event: "exec", Principal: fmt.Sprint(host, "-", i)}); err != nil {
			t.Fatal(err)
		}
	}
	var out []etcdstore.AuditLine
	err = audit.NewFollower(l.Dir(), 0).ReadNew(func(r audit.Record, line []byte) error {
		out = append(out, etcdstore.AuditLine{Seq: r.Seq, Hash: r.Hash, Time: r.Time, Line: bytes.Clone(line)})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func ship(t *testing.T, s *etcdstore.Store, host string, lines []etcdstore.AuditLine) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return s.ShipAudit(ctx, host, lines)
}

func tail(t *testing.T, s *etcdstore.Store, n int) ([]etcdstore.AuditRecord, error) {
	t.Helper()
	v, err := s.AuditTail(context.Background(), n, nil)
	return v.Records, err
}

// Two hosts ship (the first in more records than one transaction holds);
// shipping again what was shipped adds nothing; the tail merges the hosts
// by time and names each record's host; AuditLast is where a host resumes.
func TestShipAuditAndTail(t *testing.T) {
	hs := threeHosts(t)
	a, b := shipLines(t, "a", etcdstore.MaxAuditBatch+20), shipLines(t, "b", 3)
	if err := ship(t, hs[0], "a", a[:50]); err != nil {
		t.Fatal(err)
	}
	if err := ship(t, hs[0], "a", a[40:]); err != nil { // a restart that ships 40..49 again
		t.Fatal(err)
	}
	if err := ship(t, hs[1], "b", b); err != nil {
		t.Fatal(err)
	}
	last, ok, err := hs[2].AuditLast(context.Background(), "a")
	if err != nil || !ok || last.Seq != uint64(len(a)) || last.Host != "a" {
		t.Fatalf("AuditLast(a) = %d %v %v", last.Seq, ok, err)
	}
	if n := len(get(t, prefix(t)+"audit/a/", clientv3.WithPrefix()).Kvs); n != len(a) {
		t.Fatalf("etcd holds %d records of a, want %d", n, len(a))
	}
	recs, err := tail(t, hs[2], 1000)
	if err != nil || len(recs) != len(a)+len(b) {
		t.Fatalf("tail: %d records, %v", len(recs), err)
	}
	for i, r := range recs {
		if i > 0 && r.Time.Before(recs[i-1].Time) {
			t.Fatalf("record %d (%s) before the one ahead of it", i, r.Time)
		}
	}
	recs, err = tail(t, hs[2], 5)
	if err != nil || len(recs) != 5 || recs[4].Host != "b" || recs[4].Seq != 3 {
		t.Fatalf("the last 5: %+v, %v", recs, err)
	}
	hosts, _, err := hs[0].AuditHosts(context.Background(), 0)
	if err != nil || fmt.Sprint(hosts) != "[a b]" {
		t.Fatalf("hosts %v, %v", hosts, err)
	}
}

// A record of another line under a key already shipped is refused, and
// nothing of its transaction is written.
func TestShipAuditDiffers(t *testing.T) {
	s := open(t)
	if err := ship(t, s, "a", shipLines(t, "a", 1)); err != nil {
		t.Fatal(err)
	}
	other := shipLines(t, "a", 3) // another log under the same name
	err := ship(t, s, "a", other)
	if !errors.Is(err, etcdstore.ErrAuditDiffers) || !errors.Is(err, store.ErrCorrupt) {
		t.Fatalf("ship another log's record 1: %v, want ErrAuditDiffers", err)
	}
	if last, _, err := s.AuditLast(context.Background(), "a"); err != nil || last.Seq != 1 {
		t.Fatalf("after the refusal: last %d, %v", last.Seq, err)
	}
}

// A record forged under a host's key (another host's record, a record
// that does not chain to the one before it, a line tampered with) is
// refused by the tail and ends a watch; nothing reads it as that host's.
func TestAuditForgedRefused(t *testing.T) {
	s := open(t)
	a, b := shipLines(t, "a", 2), shipLines(t, "b", 2)
	if err := ship(t, s, "a", a[:1]); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	v, err := s.AuditTail(ctx, 10, nil)
	rev := v.Rev
	if err != nil {
		t.Fatal(err)
	}
	watch := s.WatchAudit(ctx, rev+1)
	key := fmt.Sprintf("%saudit/a/%020d", prefix(t), 2)
	put(t, key, string(b[1].Line)) // b's record 2 under a's key
	if _, err := tail(t, s, 10); !errors.Is(err, store.ErrCorrupt) {
		t.Fatalf("tail over b's record under a's key: %v, want ErrCorrupt", err)
	}
	if ev := <-watch; !errors.Is(ev.Err, store.ErrCorrupt) {
		t.Fatalf("watch: %+v, want ErrCorrupt", ev)
	}
	other := shipLines(t, "a", 2) // a's name, another chain: its record 2 does not follow a's record 1
	put(t, key, string(other[1].Line))
	if _, err := tail(t, s, 10); !errors.Is(err, store.ErrCorrupt) {
		t.Fatalf("tail over a record that does not chain: %v, want ErrCorrupt", err)
	}
	put(t, key, string(bytes.Replace(a[1].Line, []byte(`"a-1"`), []byte(`"a-9"`), 1)))
	if _, err := tail(t, s, 10); !errors.Is(err, store.ErrCorrupt) {
		t.Fatalf("tail over a tampered record: %v, want ErrCorrupt", err)
	}
	put(t, key, string(a[1].Line))
	if recs, err := tail(t, s, 10); err != nil || len(recs) != 2 {
		t.Fatalf("tail once a's record 2 is a's: %d, %v", len(recs), err)
	}
}

// A store opened for the audit view alone needs no seal key and refuses
// a sandbox's key.
func TestAuditOnly(t *testing.T) {
	s := openCfg(t, etcdstore.Config{AuditOnly: true, SealKey: []byte{}})
	if _, err := s.Key("sb"); err == nil {
		t.Fatal("an audit-only store read a sandbox's key")
	}
	if _, err := s.IssueKey("sb", []byte("x"), time.Now()); err == nil {
		t.Fatal("an audit-only store issued a key")
	}
	if _, err := tail(t, s, 1); err != nil {
		t.Fatal(err)
	}
}
