package audit

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestAppendVerifyReopen(t *testing.T) {
	dir := t.TempDir()
	c := newClock(oct)
	l := openLog(t, dir, c)
	recs := appendN(t, l, 5)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	rep := mustVerify(t, dir)
	if rep.Files != 1 || rep.Lines != 5 {
		t.Fatalf("report = %+v, want 1 file, 5 lines", rep)
	}

	l = openLog(t, dir, c)
	more := appendN(t, l, 3)
	if more[0].Seq != 6 || more[0].ID != "A000000000006" {
		t.Fatalf("after reopen: seq %d id %q, want 6 A000000000006", more[0].Seq, more[0].ID)
	}
	lines := splitLines(readFile(t, filepath.Join(dir, "2026-10.jsonl")))
	if got := hashHex(lines[4]); more[0].Prev != got {
		t.Fatalf("after reopen: prev %s, want hash of line 5 %s", more[0].Prev, got)
	}
	rep = mustVerify(t, dir)
	if rep.Lines != 8 || rep.Last != hashHex(lines[7]) {
		t.Fatalf("report = %+v, want 8 lines, last %s", rep, hashHex(lines[7]))
	}
	for i, r := range append(recs, more...) {
		if r.Seq != uint64(i+1) {
			t.Fatalf("record %d has seq %d", i, r.Seq)
		}
	}
}

func TestLineFormat(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, dir, newClock(oct))
	r := appendN(t, l, 1)[0]
	data := readFile(t, filepath.Join(dir, "2026-10.jsonl"))
	line := bytes.TrimSuffix(data, []byte("\n"))
	if len(line) != len(data)-1 || bytes.Contains(line, []byte("\n")) {
		t.Fatalf("want exactly one newline-terminated line, got %q", data)
	}
	if r.Prev != strings.Repeat("0", 64) {
		t.Errorf("first prev = %q, want 64 zeros", r.Prev)
	}
	if r.ID != "A000000000001" || r.Seq != 1 {
		t.Errorf("id, seq = %q, %d", r.ID, r.Seq)
	}
	if want := oct.Add(time.Second); !r.Time.Equal(want) || r.Time.Location() != time.UTC {
		t.Errorf("time = %v, want %v UTC", r.Time, want)
	}
	wantSuffix := `,"hash":"` + r.Hash + `"}`
	body, ok := bytes.CutSuffix(line, []byte(wantSuffix))
	if !ok {
		t.Fatalf("line does not end with %s: %s", wantSuffix, line)
	}
	sum := sha256.Sum256(body)
	if hex.EncodeToString(sum[:]) != r.Hash {
		t.Errorf("hash is not SHA-256 of the body")
	}
	if !bytes.Contains(line, []byte(`"echo <a> && echo b > /tmp/x"`)) {
		t.Errorf("HTML characters were escaped: %s", line)
	}
	if !bytes.HasPrefix(line, []byte(`{"id":"A000000000001","seq":1,"time":"2026-10-14T12:00:01Z","prev":"0000`)) {
		t.Errorf("unexpected line start: %s", line)
	}
}

func TestMonthRollover(t *testing.T) {
	dir := t.TempDir()
	c := newClock(time.Date(2026, 10, 31, 23, 59, 57, 0, time.UTC))
	l := openLog(t, dir, c)
	appendN(t, l, 5) // 23:59:58, 23:59:59, then 3 in November
	octLines := splitLines(readFile(t, filepath.Join(dir, "2026-10.jsonl")))
	novLines := splitLines(readFile(t, filepath.Join(dir, "2026-11.jsonl")))
	if len(octLines) != 2 || len(novLines) != 3 {
		t.Fatalf("got %d + %d lines, want 2 + 3", len(octLines), len(novLines))
	}
	first, _, err := parseLine(novLines[0])
	if err != nil {
		t.Fatal(err)
	}
	if first.Prev != hashHex(octLines[1]) || first.Seq != 3 {
		t.Fatalf("November line 1: prev %s seq %d; want chain from October", first.Prev, first.Seq)
	}
	if rep := mustVerify(t, dir); rep.Files != 2 || rep.Lines != 5 {
		t.Fatalf("report = %+v", rep)
	}

	// Reopening continues in the newest file, and a clock stepping back
	// into October does not reopen the October file.
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	c.Set(time.Date(2026, 10, 20, 0, 0, 0, 0, time.UTC))
	l = openLog(t, dir, c)
	r := appendN(t, l, 1)[0]
	if r.Seq != 6 {
		t.Fatalf("seq = %d, want 6", r.Seq)
	}
	if n := len(splitLines(readFile(t, filepath.Join(dir, "2026-11.jsonl")))); n != 4 {
		t.Fatalf("November file has %d lines, want 4", n)
	}
	mustVerify(t, dir)
}

func TestPermissions(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state", "audit")
	l := openLog(t, dir, newClock(oct))
	appendN(t, l, 1)
	st, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if perm := st.Mode().Perm(); perm != 0o700 {
		t.Errorf("dir mode = %o, want 700", perm)
	}
	st, err = os.Stat(filepath.Join(dir, "2026-10.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if perm := st.Mode().Perm(); perm != 0o600 {
		t.Errorf("file mode = %o, want 600", perm)
	}
}

func TestOpenCorruptLastLine(t *testing.T) {
	tests := []struct {
		name   string
		mutate func([]byte) []byte
	}{
		{"modified", func(b []byte) []byte {
			i := bytes.LastIndex(b, []byte(`"event":"exec`))
			b[i+len(`"event":"`)] = 'X'
			return b
		}},
		{"torn", func(b []byte) []byte { return b[:len(b)-10] }},
		{"garbage", func(b []byte) []byte { return append(b, "not json\n"...) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir, path := validLog(t, 3)
			writeFile(t, path, tt.mutate(readFile(t, path)))
			l, err := Open(Config{Dir: dir})
			if !errors.Is(err, ErrCorrupt) {
				if l != nil {
					_ = l.Close()
				}
				t.Fatalf("Open = %v, want ErrCorrupt", err)
			}
		})
	}
}

// TestOpenSkipsEmptyNewestFile covers a crash between creating a new month
// file and writing to it.
func TestOpenSkipsEmptyNewestFile(t *testing.T) {
	dir, _ := validLog(t, 2)
	writeFile(t, filepath.Join(dir, "2026-11.jsonl"), nil)
	l := openLog(t, dir, newClock(oct))
	if r := appendN(t, l, 1)[0]; r.Seq != 3 {
		t.Fatalf("seq = %d, want 3", r.Seq)
	}
	if n := len(splitLines(readFile(t, filepath.Join(dir, "2026-11.jsonl")))); n != 1 {
		t.Fatalf("November file has %d lines, want 1", n)
	}
	mustVerify(t, dir)
}

func TestTamper(t *testing.T) {
	const n = 5
	flip := func(k int, find string, off int) func([][]byte) [][]byte {
		return func(lines [][]byte) [][]byte {
			l := lines[k-1]
			i := bytes.Index(l, []byte(find))
			if find == "" {
				i = len(l)
			}
			l[i+off] = otherByte(l[i+off])
			return lines
		}
	}
	tests := []struct {
		name     string
		mutate   func([][]byte) [][]byte
		line     int
		whyStart string
	}{
		{"value byte line 2", flip(2, `"event":"`, 9), 2, "hash mismatch"},
		{"argv byte line 1", flip(1, `echo <a>`, 5), 1, "hash mismatch"},
		{"prev byte line 3", flip(3, `"prev":"`, 20), 3, "hash mismatch"},
		{"seq digit line 4", flip(4, `"seq":`, 6), 4, ""},
		{"hash byte line 4", flip(4, "", -10), 4, "hash mismatch"},
		{"hash byte non-hex line 5", func(l [][]byte) [][]byte {
			l[4][len(l[4])-3] = 'G'
			return l
		}, 5, "malformed"},
		{"JSON syntax line 2", flip(2, `{`, 0), 2, "unparsable"},
		{"closing brace line 3", flip(3, "", -1), 3, "unparsable"},
		{"deleted line 1", func(l [][]byte) [][]byte { return l[1:] }, 1, "chain broken"},
		{"deleted line 3", func(l [][]byte) [][]byte { return append(l[:2:2], l[3:]...) }, 3, "chain broken"},
		{"swapped lines 2 and 3", func(l [][]byte) [][]byte {
			l[1], l[2] = l[2], l[1]
			return l
		}, 2, "chain broken"},
		{"duplicated line 2", func(l [][]byte) [][]byte {
			return append(l[:2:2], l[1:]...)
		}, 3, "chain broken"},
		{"appended garbage", func(l [][]byte) [][]byte { return append(l, []byte("garbage")) }, n + 1, "unparsable"},
		{"empty line", func(l [][]byte) [][]byte { return append(l[:2:2], append([][]byte{nil}, l[2:]...)...) }, 3, "unparsable"},
		{"unknown field", func(l [][]byte) [][]byte {
			l[1] = append([]byte(`{"x":1,`), l[1][1:]...)
			return l
		}, 2, "unparsable"},
		{"rehashed line with skipped seq", func(l [][]byte) [][]byte {
			r, _, _ := parseLine(l[2])
			r.Seq, r.ID, r.Hash = 99, formatID(99), ""
			line, _, _ := encodeLine(r)
			l[2] = bytes.TrimSuffix(line, []byte("\n"))
			return l
		}, 3, "sequence broken"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir, path := validLog(t, n)
			writeFile(t, path, joinLines(tt.mutate(splitLines(readFile(t, path)))))
			assertBroken(t, dir, path, tt.line, tt.whyStart)
		})
	}

	truncations := []struct {
		name string
		cut  int
	}{{"missing final newline", 1}, {"last line cut in half", 100}}
	for _, tt := range truncations {
		t.Run(tt.name, func(t *testing.T) {
			dir, path := validLog(t, n)
			b := readFile(t, path)
			writeFile(t, path, b[:len(b)-tt.cut])
			assertBroken(t, dir, path, n, "torn write")
		})
	}

	t.Run("last line of earlier month removed", func(t *testing.T) {
		dir := t.TempDir()
		l := openLog(t, dir, newClock(time.Date(2026, 10, 31, 23, 59, 57, 0, time.UTC)))
		appendN(t, l, 4)
		octPath := filepath.Join(dir, "2026-10.jsonl")
		lines := splitLines(readFile(t, octPath))
		writeFile(t, octPath, joinLines(lines[:len(lines)-1]))
		assertBroken(t, dir, filepath.Join(dir, "2026-11.jsonl"), 1, "chain broken")
	})
}

// otherByte returns a byte different from c: another hex digit for a hex
// digit, so hash fields stay well-formed.
func otherByte(c byte) byte {
	switch {
	case c == '0':
		return '1'
	case isLowerHex([]byte{c}):
		return '0'
	}
	return c ^ 1
}

func assertBroken(t *testing.T, dir, file string, line int, whyStart string) {
	t.Helper()
	_, err := Verify(dir)
	var be *BrokenError
	if !errors.As(err, &be) {
		t.Fatalf("Verify = %v, want *BrokenError", err)
	}
	if be.File != file || be.Line != line || !strings.HasPrefix(be.Why, whyStart) {
		t.Fatalf("Verify = %v, want %s:%d: %s...", err, file, line, whyStart)
	}
	if !errors.Is(err, ErrCorrupt) {
		t.Fatalf("BrokenError does not wrap ErrCorrupt")
	}
}

func TestLineTooLong(t *testing.T) {
	dir, path := validLog(t, 2)
	b := readFile(t, path)
	b = append(b, bytes.Repeat([]byte("x"), maxLine+1)...)
	writeFile(t, path, append(b, '\n'))
	assertBroken(t, dir, path, 3, "line longer")
}

func TestVerifyEmptyAndMissing(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "README"), []byte("not a month file"))
	rep := mustVerify(t, dir)
	if rep.Files != 0 || rep.Lines != 0 || rep.Last != zeroHash {
		t.Fatalf("report = %+v", rep)
	}
	if _, err := Verify(filepath.Join(dir, "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Verify(missing) = %v, want ErrNotExist", err)
	}
}

func TestConcurrentAppend(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, dir, newClock(oct))
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 50 {
				if _, err := l.Append(context.Background(), sampleRecord(g*50+i)); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if rep := mustVerify(t, dir); rep.Lines != 400 {
		t.Fatalf("lines = %d, want 400", rep.Lines)
	}
	recs, err := Tail(dir, 1000)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range recs {
		if r.Seq != uint64(i+1) {
			t.Fatalf("record %d has seq %d", i, r.Seq)
		}
	}
}

func TestAppendErrors(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, dir, newClock(oct))
	ctx := context.Background()
	if _, err := l.Append(ctx, Record{}); err == nil {
		t.Error("Append without event succeeded")
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := l.Append(cancelled, sampleRecord(0)); !errors.Is(err, context.Canceled) {
		t.Errorf("Append(cancelled) = %v", err)
	}
	if r := appendN(t, l, 1)[0]; r.Seq != 1 {
		t.Errorf("seq after refused appends = %d, want 1", r.Seq)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Errorf("second Close = %v", err)
	}
	if _, err := l.Append(ctx, sampleRecord(0)); !errors.Is(err, ErrClosed) {
		t.Errorf("Append after Close = %v, want ErrClosed", err)
	}
}

func TestBrokenAfterWriteFailure(t *testing.T) {
	dir := t.TempDir()
	c := newClock(oct)
	l := openLog(t, dir, c)
	appendN(t, l, 2)
	_ = l.f.Close() // make the next write fail
	ctx := context.Background()
	for range 2 {
		if _, err := l.Append(ctx, sampleRecord(0)); !errors.Is(err, ErrBroken) || !errors.Is(err, os.ErrClosed) {
			t.Fatalf("Append after failed write = %v, want ErrBroken wrapping os.ErrClosed", err)
		}
	}
	l = openLog(t, dir, c)
	if r := appendN(t, l, 1)[0]; r.Seq != 3 {
		t.Fatalf("seq after reopen = %d, want 3", r.Seq)
	}
	mustVerify(t, dir)
}

func TestTailFind(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, dir, newClock(time.Date(2026, 10, 31, 23, 59, 55, 0, time.UTC)))
	recs := appendN(t, l, 10) // 4 in October, 6 in November

	for _, n := range []int{0, 1, 3, 6, 7, 10, 50} {
		got, err := Tail(dir, n)
		if err != nil {
			t.Fatal(err)
		}
		want := recs[max(0, 10-n):]
		if len(got) != len(want) {
			t.Fatalf("Tail(%d) returned %d records, want %d", n, len(got), len(want))
		}
		for i := range got {
			if got[i].ID != want[i].ID || got[i].Hash != want[i].Hash {
				t.Fatalf("Tail(%d)[%d] = %s, want %s", n, i, got[i].ID, want[i].ID)
			}
		}
	}

	r, err := Find(dir, "A000000000003")
	if err != nil {
		t.Fatal(err)
	}
	if r.Seq != 3 || r.Hash != recs[2].Hash || !r.Time.Equal(recs[2].Time) || *r.ExitCode != *recs[2].ExitCode {
		t.Fatalf("Find = %+v, want %+v", r, recs[2])
	}
	if _, err := Find(dir, "A000000000011"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Find(missing) = %v, want ErrNotFound", err)
	}

	byReq, err := FindRequest(dir, "req-1")
	if err != nil {
		t.Fatal(err)
	}
	if len(byReq) != 3 || byReq[0].Seq != 2 || byReq[1].Seq != 6 || byReq[2].Seq != 10 {
		t.Fatalf("FindRequest returned %d records", len(byReq))
	}
	if _, err := FindRequest(dir, "nope"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("FindRequest(missing) = %v, want ErrNotFound", err)
	}
}

func BenchmarkAppend(b *testing.B) {
	l, err := Open(Config{Dir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	ctx := context.Background()
	rec := sampleRecord(1)
	for b.Loop() {
		if _, err := l.Append(ctx, rec); err != nil {
			b.Fatal(err)
		}
	}
}

// A relayed request's descriptor id finds its records, but never adds a
// sandbox's records to another execution's: a sandbox choosing a running
// execution's id as its descriptor's does not show in that execution's.
func TestFindRequestByRelayID(t *testing.T) {
	dir := t.TempDir()
	l, err := Open(Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for _, r := range []Record{
		{Event: "exec.result", RequestID: "victim"},
		{Event: "exec.result", RequestID: "server-chosen", RelayID: "victim"},
		{Event: "exec.result", RequestID: "server-chosen-2", RelayID: "relay-1"},
	} {
		if _, err := l.Append(context.Background(), r); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := FindRequest(dir, "victim"); err != nil || len(got) != 1 || got[0].RelayID != "" {
		t.Errorf("by the execution's id: %+v %v", got, err)
	}
	if got, err := FindRequest(dir, "relay-1"); err != nil || len(got) != 1 || got[0].RequestID != "server-chosen-2" {
		t.Errorf("by a descriptor's id: %+v %v", got, err)
	}
}
