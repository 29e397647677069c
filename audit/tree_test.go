package audit

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/mod/sumdb/tlog"
)

// testKey is a checkpoint key for the tests, made once.
var testSKey, testVKey = func() (string, string) {
	s, v, err := GenerateSigner("coily/test")
	if err != nil {
		panic(err)
	}
	return s, v
}()

// signedHead signs the log's current tree.
func signedHead(t testing.TB, l *Log) ([]byte, Checkpoint) {
	t.Helper()
	tr, err := l.TreeHead()
	if err != nil {
		t.Fatal(err)
	}
	msg, err := SignCheckpoint(testSKey, tr)
	if err != nil {
		t.Fatal(err)
	}
	c, err := OpenCheckpoint(msg, testVKey)
	if err != nil {
		t.Fatalf("OpenCheckpoint of what SignCheckpoint wrote: %v", err)
	}
	return msg, c
}

// recomputed is the tree of the lines in dir, computed with the
// library's functions over an in-memory store (not the frontier).
func recomputed(t testing.TB, dir string) Tree {
	t.Helper()
	var stored []tlog.Hash
	r := tlog.HashReaderFunc(func(idx []int64) ([]tlog.Hash, error) {
		out := make([]tlog.Hash, len(idx))
		for i, x := range idx {
			out[i] = stored[x]
		}
		return out, nil
	})
	var n int64
	_, err := verify(dir, func(line []byte) error {
		hs, err := tlog.StoredHashes(n, line, r)
		stored = append(stored, hs...)
		n++
		return err
	}, 0)
	if err != nil {
		t.Fatal(err)
	}
	h, err := tlog.TreeHash(n, r)
	if err != nil {
		t.Fatal(err)
	}
	return Tree{N: n, Hash: h}
}

// A normal run: rotations (a small MaxFileSize), restarts, pending
// appends: the tree the log keeps is the tree of its lines at every step,
// and every checkpoint signed on the way verifies against the final log
// (0 false alarms), with a consistency proof from it.
func TestTreeFollowsTheLines(t *testing.T) {
	dir := t.TempDir()
	c := newClock(oct)
	var signed []Checkpoint
	for run := range 4 {
		l, err := Open(Config{Dir: dir, Now: c.Now, MaxFileSize: 2 << 10,
			Checkpoint: func() map[string]string { return map[string]string{"lockout": "inactive"} }})
		if err != nil {
			t.Fatal(err)
		}
		for i := range 13 {
			if _, err := l.AppendPending(context.Background(), sampleRecord(i)); err != nil {
				t.Fatal(err)
			}
			appendN(t, l, 1)
			if i%5 == 0 {
				_, cp := signedHead(t, l)
				if want := recomputed(t, dir); cp.Tree != want {
					t.Fatalf("run %d: the log's tree %v, its lines' %v", run, cp.Tree, want)
				}
				signed = append(signed, cp)
			}
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if files, _ := logFiles(dir); len(files) < 4 {
		t.Fatalf("only %d files: the run did not rotate", len(files))
	}
	for _, cp := range signed {
		rep, err := VerifyCheckpoint(dir, cp)
		if err != nil || !rep.Consistent || rep.Tree != recomputed(t, dir) {
			t.Fatalf("checkpoint at %d: %+v, %v", cp.N, rep, err)
		}
	}
}

// The hash file is derived data: missing, cut short, torn (a partial
// hash), longer than the log (hashes of lines a crash lost), or holding
// another log's hashes, Open makes it the lines' tree again.
func TestTreeFileRebuiltAtOpen(t *testing.T) {
	damage := map[string]func(t *testing.T, path string){
		"missing": func(t *testing.T, path string) { _ = os.Remove(path) },
		"short":   func(t *testing.T, path string) { _ = os.Truncate(path, 32*7) },
		"torn":    func(t *testing.T, path string) { _ = os.Truncate(path, fileSize(t, path)-5) },
		"longer": func(t *testing.T, path string) {
			writeFile(t, path, append(readFile(t, path), make([]byte, 32*3)...))
		},
		"short and foreign": func(t *testing.T, path string) {
			b := readFile(t, path)[:32*20]
			for i := range b {
				b[i] ^= 0x5a
			}
			writeFile(t, path, b)
		},
		"foreign": func(t *testing.T, path string) {
			b := readFile(t, path)
			b[len(b)-1] ^= 1 // the last stored hash is an interior one or the last leaf
			for i := range b[len(b)-200:] {
				b[len(b)-200+i] ^= 0xff
			}
			writeFile(t, path, b)
		},
	}
	for name, hurt := range damage {
		t.Run(name, func(t *testing.T) {
			dir, _ := validLog(t, 37)
			want := recomputed(t, dir)
			hurt(t, filepath.Join(dir, TreeFile))
			l := openLog(t, dir, newClock(oct))
			got, err := l.TreeHead()
			if err != nil || got != want {
				t.Fatalf("tree after Open: %v (%v), want %v", got, err, want)
			}
			appendN(t, l, 3)
			l.Close()
			if _, err := VerifyCheckpoint(dir, Checkpoint{Origin: "coily/test", Tree: want}); err != nil {
				t.Fatalf("VerifyCheckpoint after the rebuild: %v", err)
			}
		})
	}
}

func fileSize(t testing.TB, path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// Each way a root on the host could rewrite the log is found by
// VerifyCheckpoint with a witnessed checkpoint (older than or as new as
// the log), and named.
func TestVerifyCheckpointFindsTampering(t *testing.T) {
	type setup struct {
		dir   string
		files []string // the log's files, oldest first
		cp    Checkpoint
	}
	build := func(t *testing.T) setup {
		dir := t.TempDir()
		l, err := Open(Config{Dir: dir, Now: newClock(oct).Now, MaxFileSize: 2 << 10})
		if err != nil {
			t.Fatal(err)
		}
		appendN(t, l, 30)
		_, cp := signedHead(t, l) // the witness holds this one
		appendN(t, l, 2)
		l.Close()
		files, _ := logFiles(dir)
		var paths []string
		for _, f := range files {
			paths = append(paths, filepath.Join(dir, f.name))
		}
		if len(paths) < 4 {
			t.Fatalf("%d files", len(paths))
		}
		return setup{dir: dir, files: paths, cp: cp}
	}
	cases := []struct {
		name   string
		tamper func(t *testing.T, s setup)
		want   string // in the error
	}{
		{"truncate the tail", func(t *testing.T, s setup) {
			for i, k := len(s.files)-1, 5; k > 0; i-- { // the last 5 records, across files
				n := min(k, len(splitLines(readFile(t, s.files[i]))))
				cutLines(t, s.files[i], n)
				k -= n
			}
		}, "removed from its end"},
		{"delete the newest file", func(t *testing.T, s setup) {
			_ = os.Remove(s.files[len(s.files)-1])
			_ = os.Remove(s.files[len(s.files)-2])
		}, "removed from its end"},
		{"swap two files", func(t *testing.T, s setup) {
			a, b := readFile(t, s.files[1]), readFile(t, s.files[2])
			writeFile(t, s.files[1], b)
			writeFile(t, s.files[2], a)
		}, "chain broken"},
		{"edit one record", func(t *testing.T, s setup) {
			b := readFile(t, s.files[1])
			writeFile(t, s.files[1], []byte(strings.Replace(string(b), `"agent"`, `"agenx"`, 1)))
		}, "line was modified"},
		{"edit a record after the checkpoint", func(t *testing.T, s setup) {
			lines := splitLines(readFile(t, s.files[len(s.files)-1]))
			lines[len(lines)-1] = []byte(strings.Replace(string(lines[len(lines)-1]), `"agent"`, `"agenx"`, 1))
			writeFile(t, s.files[len(s.files)-1], joinLines(lines))
		}, "line was modified"},
		{"rewrite a suffix with recomputed hashes", func(t *testing.T, s setup) {
			rewriteFrom(t, s.dir, 12, func(r *Record) { r.Principal = "someone-else" })
		}, "were changed"},
		{"rewrite a suffix, hash file too", func(t *testing.T, s setup) {
			rewriteFrom(t, s.dir, 20, func(r *Record) { r.Argv = []string{"true"} })
			l := openLog(t, s.dir, newClock(oct)) // a fresh hash file of the new lines
			l.Close()
		}, "were changed"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := build(t)
			if _, err := VerifyCheckpoint(s.dir, s.cp); err != nil {
				t.Fatalf("before tampering: %v", err)
			}
			tc.tamper(t, s)
			_, err := VerifyCheckpoint(s.dir, s.cp)
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("VerifyCheckpoint = %v, want ErrCorrupt naming %q", err, tc.want)
			}
		})
	}
}

// rewriteFrom rewrites every record from seq on (edit changes each),
// re-chaining and re-hashing them, as a root who knows the format would:
// the chain alone cannot tell.
func rewriteFrom(t *testing.T, dir string, seq uint64, edit func(*Record)) {
	t.Helper()
	files, _ := logFiles(dir)
	prev := zeroHash
	for _, f := range files {
		path := filepath.Join(dir, f.name)
		var out [][]byte
		for _, b := range splitLines(readFile(t, path)) {
			r, _, err := parseLine(b)
			if err != nil {
				t.Fatal(err)
			}
			if r.Seq >= seq {
				edit(&r)
				r.Prev, r.Hash = prev, ""
				line, _, err := encodeLine(r)
				if err != nil {
					t.Fatal(err)
				}
				b = line[:len(line)-1]
			}
			prev = hashHex(b)
			out = append(out, b)
		}
		writeFile(t, path, joinLines(out))
	}
	mustVerify(t, dir)
}

// Verify parses lines in batches on every core: the line it names is
// still the first bad one, by its number in its file, past many batches.
func TestVerifyNamesLineAcrossBatches(t *testing.T) {
	dir, path := validLog(t, 3*batchLines+17)
	lines := splitLines(readFile(t, path))
	for _, bad := range []int{batchLines, batchLines + 1, 2*batchLines + 5, len(lines)} {
		edited := append([][]byte(nil), lines...)
		edited[bad-1] = []byte(strings.Replace(string(lines[bad-1]), `"agent"`, `"agenx"`, 1))
		edited[len(edited)-1] = []byte(strings.Replace(string(edited[len(edited)-1]), `"uid=1000"`, `"uid=1001"`, 1))
		writeFile(t, path, joinLines(edited))
		rep, err := Verify(dir)
		var be *BrokenError
		if !errors.As(err, &be) || be.Line != bad || rep.Lines != bad-1 {
			t.Fatalf("line %d edited: %+v, %v", bad, rep, err)
		}
	}
	writeFile(t, path, joinLines(lines))
	if rep := mustVerify(t, dir); rep.Lines != len(lines) {
		t.Fatalf("%+v", rep)
	}
}

// A running server's pending line (a command's decision, before its
// result) has its hashes written with the next durable append: verifying
// against a checkpoint meanwhile is no alarm.
func TestVerifyCheckpointBesidePendingLine(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, dir, newClock(oct))
	appendN(t, l, 9)
	_, cp := signedHead(t, l)
	if _, err := l.AppendPending(context.Background(), sampleRecord(1)); err != nil {
		t.Fatal(err)
	}
	rep, err := VerifyCheckpoint(dir, cp)
	if err != nil || rep.Lines != 10 || !rep.Consistent {
		t.Fatalf("beside a pending line: %+v, %v", rep, err)
	}
	appendN(t, l, 1)
	if _, err := VerifyCheckpoint(dir, cp); err != nil {
		t.Fatal(err)
	}
}

// linesTree is the tree of every line of the log in dir in its files'
// order, whether or not they verify as a chain.
func linesTree(t testing.TB, dir string) Tree {
	t.Helper()
	files, err := logFiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	fr := &frontier{}
	for _, lf := range files {
		if err := eachLine(filepath.Join(dir, lf.name), func(_ int, b []byte) error {
			_, err := fr.add(b)
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	h, err := fr.root()
	if err != nil {
		t.Fatal(err)
	}
	return Tree{N: fr.n, Hash: h}
}

// The oldest two files swapped (the second now begins with record 1):
// SettleTree trusting none of the hash file, and Open rebuilding a
// missing one, derive the tree of the lines in the files' order, which
// does not hold the checkpoint signed before. Both used to fail ("the
// log's files hold 17 lines but its last record is 22"), so that a
// server could not start locked out, naming what disagrees
// (TestCLIWitnessDetectsRotatedLogTampering).
func TestTreeOfSwappedFiles(t *testing.T) {
	dir := t.TempDir()
	l, err := Open(Config{Dir: dir, Now: newClock(oct).Now, MaxFileSize: 2 << 10})
	if err != nil {
		t.Fatal(err)
	}
	appendN(t, l, 30)
	_, cp := signedHead(t, l)
	l.Close()
	files, _ := logFiles(dir)
	if len(files) < 3 {
		t.Fatalf("%d files", len(files))
	}
	a, b := filepath.Join(dir, files[0].name), filepath.Join(dir, files[1].name)
	da, db := readFile(t, a), readFile(t, b)
	writeFile(t, a, db)
	writeFile(t, b, da)
	want := linesTree(t, dir)
	if want.N != cp.N || want.Hash == cp.Hash {
		t.Fatalf("the swapped lines' tree %v, the checkpoint's %v", want, cp.Tree)
	}
	for _, rebuild := range []bool{false, true} {
		if rebuild {
			if err := os.Remove(filepath.Join(dir, TreeFile)); err != nil {
				t.Fatal(err)
			}
		}
		l, err := Open(Config{Dir: dir, Now: newClock(oct).Now, MaxFileSize: 2 << 10})
		if err != nil {
			t.Fatalf("Open (rebuilding the hash file: %v): %v", rebuild, err)
		}
		if err := l.SettleTree(nil); err != nil {
			t.Fatalf("SettleTree (rebuilding the hash file: %v): %v", rebuild, err)
		}
		got, err := l.TreeHead()
		l.Close()
		if err != nil || got != want {
			t.Fatalf("tree head (rebuilding the hash file: %v): %v %v, want %v", rebuild, got, err, want)
		}
	}
	var cerr *CheckpointError
	if err := CheckCheckpoint(dir, cp); !errors.As(err, &cerr) {
		t.Fatalf("CheckCheckpoint of the swapped files: %v", err)
	}
}
