package audit

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// Head is the last synced line: never a line AppendPending wrote that
// nothing synced. The anchor hears it when a file closes at rotation and
// at Close, each time the log's real head.
func TestHeadDurableAndAnchored(t *testing.T) {
	dir := t.TempDir()
	c := newClock(oct)
	l, err := Open(Config{Dir: dir, Now: c.Now, MaxFileSize: 2 << 10})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var told []Head
	l.SetAnchor(func(h Head) {
		mu.Lock()
		defer mu.Unlock()
		told = append(told, h)
	})
	if h := l.Head(); h.Seq != 0 || h.Hash != zeroHash {
		t.Fatalf("empty log's head %+v", h)
	}
	r1, _ := l.Append(context.Background(), Record{Event: "e"})
	if h := l.Head(); h.Seq != r1.Seq {
		t.Fatalf("head %+v after a synced append of %d", h, r1.Seq)
	}
	if _, err := l.AppendPending(context.Background(), Record{Event: "e"}); err != nil {
		t.Fatal(err)
	}
	if h := l.Head(); h.Seq != r1.Seq {
		t.Fatalf("head %+v moved to a line nothing synced", h)
	}
	appendN(t, l, 30) // rotates a few times
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	rep := mustVerify(t, dir)
	if len(told) < 3 {
		t.Fatalf("anchor told %d times over %d files", len(told), rep.Files)
	}
	if last := told[len(told)-1]; last.Seq != uint64(rep.Lines) || last.Hash != rep.Last {
		t.Fatalf("anchor told %+v at Close; the log ends at %d %s", last, rep.Lines, rep.Last)
	}
	for _, h := range told {
		if err := CheckHead(dir, h); err != nil {
			t.Fatalf("anchored head %+v: %v", h, err)
		}
	}
	// Reopened, the head is where it was.
	l = openLog(t, dir, c)
	if h := l.Head(); h.Seq != uint64(rep.Lines) || h.Hash != rep.Last {
		t.Fatalf("reopened head %+v", h)
	}
}

// CheckHead: every way a log can fall short of a recorded head.
func TestCheckHead(t *testing.T) {
	build := func(t *testing.T) (string, []Head) {
		dir := t.TempDir()
		c := newClock(oct)
		l, err := Open(Config{Dir: dir, Now: c.Now, MaxFileSize: 2 << 10})
		if err != nil {
			t.Fatal(err)
		}
		var heads []Head
		for range 30 {
			if _, err := l.Append(context.Background(), sampleRecord(1)); err != nil {
				t.Fatal(err)
			}
			heads = append(heads, l.Head())
		}
		l.Close()
		return dir, heads
	}
	files := func(t *testing.T, dir string) []string {
		lf, _ := logFiles(dir) // oldest first
		if len(lf) < 3 {
			t.Fatalf("%d files", len(lf))
		}
		var fs []string
		for _, f := range lf {
			fs = append(fs, filepath.Join(dir, f.name))
		}
		return fs
	}
	for _, tc := range []struct {
		name   string
		head   int // index into the heads; -1 for none
		damage func(t *testing.T, dir string)
		want   string // in the error; "" for none
	}{
		{"intact, last", 29, func(*testing.T, string) {}, ""},
		{"intact, earlier", 3, func(*testing.T, string) {}, ""},
		{"nothing recorded", -1, func(t *testing.T, dir string) { os.RemoveAll(dir); os.Mkdir(dir, 0o700) }, ""},
		{"last line cut", 29, func(t *testing.T, dir string) { cutLines(t, lastOf(files(t, dir)), 1) }, "ends at record 29 but its head was recorded at record 30"},
		{"newest file removed", 29, func(t *testing.T, dir string) { os.Remove(lastOf(files(t, dir))) }, "were removed from its end"},
		{"every file removed", 29, func(t *testing.T, dir string) {
			for _, f := range files(t, dir) {
				os.Remove(f)
			}
		}, "the log ends at record 0"},
		{"cut, then as many appended", 29, func(t *testing.T, dir string) {
			cutLines(t, lastOf(files(t, dir)), 2)
			l := openLog(t, dir, newClock(oct))
			appendN(t, l, 2)
		}, "the log was rewritten"},
		{"older files removed, head kept", 29, func(t *testing.T, dir string) { os.Remove(files(t, dir)[0]) }, ""},
		{"the head's file removed, later kept", 3, func(t *testing.T, dir string) { os.Remove(files(t, dir)[0]) }, "has no record 4"},
		{"a line inside removed", 29, func(t *testing.T, dir string) {
			f := lastOf(files(t, dir))
			lines := splitLines(readFile(t, f))
			writeFile(t, f, joinLines(append(lines[:1:1], lines[2:]...)))
		}, "records were removed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, heads := build(t)
			h := Head{}
			if tc.head >= 0 {
				h = heads[tc.head]
			}
			tc.damage(t, dir)
			err := CheckHead(dir, h)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("CheckHead: %v", err)
				}
				return
			}
			var he *HeadError
			if !errors.As(err, &he) || !errors.Is(err, ErrCorrupt) || !bytes.Contains([]byte(err.Error()), []byte(tc.want)) {
				t.Fatalf("CheckHead = %v; want a *HeadError saying %q", err, tc.want)
			}
		})
	}
}

func lastOf(s []string) string { return s[len(s)-1] }

// cutLines removes the last n lines of the file at path.
func cutLines(t testing.TB, path string, n int) {
	t.Helper()
	lines := splitLines(readFile(t, path))
	writeFile(t, path, joinLines(lines[:len(lines)-n]))
}

// FuzzCheckHead cuts a valid log (two files) at any byte and checks a head
// recorded at any of its lines: a cut that removes that line is always
// reported, and a cut at a line boundary after it never is.
func FuzzCheckHead(f *testing.F) {
	for _, seed := range [][2]uint{{0, 0}, {5, 100}, {7, 1 << 20}, {3, 2500}, {9, 3000}} {
		f.Add(seed[0], seed[1])
	}
	f.Fuzz(func(t *testing.T, line, cut uint) {
		dir := t.TempDir()
		c := newClock(oct)
		l := openLog(t, dir, c)
		heads := make([]Head, 0, 10)
		for i := range 10 {
			if i == 5 {
				c.Set(oct.AddDate(0, 1, 0)) // the second file
			}
			if _, err := l.Append(context.Background(), sampleRecord(i)); err != nil {
				t.Fatal(err)
			}
			heads = append(heads, l.Head())
		}
		l.Close()
		h := heads[line%10]
		names := []string{filepath.Join(dir, "2026-10.jsonl"), filepath.Join(dir, "2026-11.jsonl")}
		whole := append(readFile(t, names[0]), readFile(t, names[1])...)
		first := len(readFile(t, names[0]))
		at := int(cut % uint(len(whole)+1))
		kept := whole[:at]
		writeFile(t, names[0], kept[:min(at, first)])
		writeFile(t, names[1], kept[min(at, first):])
		err := CheckHead(dir, h)
		end := 0 // the byte after the head's line
		for range h.Seq {
			end += bytes.IndexByte(whole[end:], '\n') + 1
		}
		switch {
		case at < end && err == nil:
			t.Fatalf("cut at %d of %d removed record %d, and CheckHead passed", at, len(whole), h.Seq)
		case at >= end && (at == len(whole) || whole[at-1] == '\n') && err != nil:
			t.Fatalf("cut at a line boundary %d after record %d (ends at %d): %v", at, h.Seq, end, err)
		}
	})
}
