package etcdstore_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"

	"coily.dev/coily/audit"
	"coily.dev/coily/store/etcdstore"
)

// bigLines is shipLines of records of about size bytes each.
func bigLines(t *testing.T, host string, n, size int) []etcdstore.AuditLine {
	t.Helper()
	l, err := audit.Open(audit.Config{Dir: t.TempDir(), Host: host})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for i := range n {
		r := audit.Record{Event: "exec", Principal: fmt.Sprint(host, "-", i), Argv: []string{strings.Repeat("x", size)}}
		if _, err := l.Append(context.Background(), r); err != nil {
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

// TestAuditTailBoundedByTotal: 40 hosts of 12 records each, a tail of 10:
// never more than 10 records are kept while the hosts are read (not 10 a
// host), and the 10 are the newest of all.
func TestAuditTailBoundedByTotal(t *testing.T) {
	s := open(t)
	var newest []etcdstore.AuditLine
	for h := range 40 {
		host := fmt.Sprintf("h%02d", h)
		lines := shipLines(t, host, 12)
		if err := ship(t, s, host, lines); err != nil {
			t.Fatal(err)
		}
		newest = append(newest, lines...)
	}
	most := 0
	etcdstore.SetTailHook(s, func(records, _ int) { most = max(most, records) })
	v, err := s.AuditTail(context.Background(), 10, nil)
	if err != nil {
		t.Fatal(err)
	}
	if most > 10 {
		t.Fatalf("the tail of 10 held %d records at once while reading 40 hosts: bounded by host, not in all", most)
	}
	if len(v.Records) != 10 || v.Dropped != 0 {
		t.Fatalf("%d records, %d dropped; want 10, 0", len(v.Records), v.Dropped)
	}
	last := newest[len(newest)-1] // the last host shipped wrote last
	if r := v.Records[9]; r.Seq != last.Seq || r.Hash != last.Hash {
		t.Fatalf("the newest record is %s/%d, want the last written", r.Host, r.Seq)
	}
}

// TestAuditTailBoundedByBytes: records of one size under a bound of three
// and a half of them: the tail keeps the newest three, says it left older
// ones out, and never holds more than the bound.
func TestAuditTailBoundedByBytes(t *testing.T) {
	lines := map[string][]etcdstore.AuditLine{"a": bigLines(t, "a", 5, 1000), "b": bigLines(t, "b", 5, 1000)}
	size := 0
	for _, ls := range lines {
		for _, l := range ls {
			size = max(size, len(l.Line))
		}
	}
	bound := 3*size + size/2
	s := openCfg(t, etcdstore.Config{AuditTailBytes: bound})
	for _, h := range []string{"a", "b"} {
		if err := ship(t, s, h, lines[h]); err != nil {
			t.Fatal(err)
		}
	}
	most := 0
	etcdstore.SetTailHook(s, func(_, bytes int) { most = max(most, bytes) })
	v, err := s.AuditTail(context.Background(), 100, nil)
	if err != nil {
		t.Fatal(err)
	}
	if most > bound {
		t.Fatalf("the tail held %d bytes of records at once, more than its bound %d", most, bound)
	}
	if len(v.Records) != 3 || v.Dropped < 1 {
		t.Fatalf("%d records of %d bytes kept, %d said dropped; want 3 within %d bytes, and the rest said dropped", len(v.Records), size, v.Dropped, bound)
	}
	if r := v.Records[2]; r.Host != "b" || r.Seq != 5 {
		t.Fatalf("the newest kept is %s/%d, want b/5", r.Host, r.Seq)
	}
}
