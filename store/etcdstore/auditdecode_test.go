package etcdstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"coily.dev/coily/audit"
	"coily.dev/coily/store"
)

// logLines writes n records to a new log of host and returns their lines
// as written (without '\n').
func logLines(tb testing.TB, host string, n int) [][]byte {
	tb.Helper()
	l, err := audit.Open(audit.Config{Dir: tb.TempDir(), Host: host})
	if err != nil {
		tb.Fatal(err)
	}
	defer l.Close()
	for i := range n {
		if _, err := l.Append(context.Background(), audit.Record{Event: "exec", Principal: fmt.Sprint("p", i)}); err != nil {
			tb.Fatal(err)
		}
	}
	var out [][]byte
	err = audit.NewFollower(l.Dir(), 0).ReadNew(func(_ audit.Record, line []byte) error {
		out = append(out, bytes.Clone(line))
		return nil
	})
	if err != nil {
		tb.Fatal(err)
	}
	return out
}

func seqKey(prefix, host string, seq uint64) string {
	return fmt.Sprintf("%saudit/%s/%020d", prefix, host, seq)
}

// A shipped record is read back only when its key is exactly one host
// and a 20-digit seq, and its value one line of that host's record at
// that seq, whole (ParseLine); every hostile variant is ErrCorrupt.
func TestDecodeAudit(t *testing.T) {
	const p = "/coily/team/"
	a := logLines(t, "a", 2)
	b := logLines(t, "b", 1)
	anon := logLines(t, "", 1)
	tampered := bytes.Replace(a[0], []byte(`"p0"`), []byte(`"p9"`), 1)
	unknown := bytes.Replace(a[0], []byte(`{"id"`), []byte(`{"x":1,"id"`), 1)
	for _, c := range []struct {
		name, key string
		value     []byte
		ok        bool
	}{
		{"the record", seqKey(p, "a", 1), a[0], true},
		{"the second", seqKey(p, "a", 2), a[1], true},
		{"another prefix", seqKey("/coily/other/", "a", 1), a[0], false},
		{"under another dir", p + "audithosts/a", a[0], false},
		{"no seq", p + "audit/a", a[0], false},
		{"empty host", seqKey(p, "", 1), a[0], false},
		{"escaped host", seqKey(p, "a%2Fb", 1), a[0], false},
		{"dot-dot host", seqKey(p, "..", 1), a[0], false},
		{"seq of 19 digits", fmt.Sprintf("%saudit/a/%019d", p, 1), a[0], false},
		{"seq of 21 digits", fmt.Sprintf("%saudit/a/%021d", p, 1), a[0], false},
		{"seq 0", seqKey(p, "a", 0), a[0], false},
		{"seq not digits", p + "audit/a/0000000000000000000x", a[0], false},
		{"seq signed", p + "audit/a/+0000000000000000001", a[0], false},
		{"seq over uint64", p + "audit/a/99999999999999999999", a[0], false},
		{"a further slash", seqKey(p, "a", 1) + "/1", a[0], false},
		{"another host's record", seqKey(p, "a", 1), b[0], false},
		{"a record naming no host", seqKey(p, "a", 1), anon[0], false},
		{"another seq's record", seqKey(p, "a", 2), a[0], false},
		{"tampered", seqKey(p, "a", 1), tampered, false},
		{"an unknown field", seqKey(p, "a", 1), unknown, false},
		{"two lines", seqKey(p, "a", 1), append(append(bytes.Clone(a[0]), '\n'), a[1]...), false},
		{"a trailing newline", seqKey(p, "a", 1), append(bytes.Clone(a[0]), '\n'), false},
		{"data after", seqKey(p, "a", 1), append(bytes.Clone(a[0]), " {}"...), false},
		{"null", seqKey(p, "a", 1), []byte("null"), false},
		{"empty", seqKey(p, "a", 1), nil, false},
		{"too long", seqKey(p, "a", 1), append(bytes.Clone(a[0]), strings.Repeat(" ", MaxAuditLine)...), false},
	} {
		r, err := decodeAudit(p, []byte(c.key), c.value)
		switch {
		case c.ok && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case !c.ok && !errors.Is(err, store.ErrCorrupt):
			t.Errorf("%s: %+v, %v, want ErrCorrupt", c.name, r, err)
		}
	}
	r, err := decodeAudit(p, []byte(seqKey(p, "a", 2)), a[1])
	if err != nil || r.Host != "a" || r.Seq != 2 || r.Principal != "p1" {
		t.Fatalf("record 2: %+v, %v", r, err)
	}
	first, _ := decodeAudit(p, []byte(seqKey(p, "a", 1)), a[0])
	if r.Prev != first.LineHash {
		t.Fatalf("record 2's prev %s is not record 1's line hash %s", r.Prev, first.LineHash)
	}
}

// The decoder never panics, and what it accepts names the host and seq
// its key does.
func FuzzDecodeAudit(f *testing.F) {
	const p = "/coily/team/"
	a := logLines(f, "a", 2)
	f.Add(seqKey(p, "a", 1), a[0])
	f.Add(seqKey(p, "a", 2), a[1])
	f.Add(seqKey(p, "b", 1), a[0])
	f.Add(p+"audit/a/+0000000000000000001", a[0])
	f.Add(seqKey(p, "a", 1), []byte("null"))
	f.Fuzz(func(t *testing.T, key string, value []byte) {
		r, err := decodeAudit(p, []byte(key), value)
		if err != nil {
			if !errors.Is(err, store.ErrCorrupt) {
				t.Fatalf("error %v is not ErrCorrupt", err)
			}
			return
		}
		if key != seqKey(p, r.Host, r.Seq) || CheckHostName(r.Host) != nil {
			t.Fatalf("accepted %q as record %d of %q", key, r.Seq, r.Host)
		}
	})
}
