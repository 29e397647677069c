package audit

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The check a server makes at start against the checkpoint its state file
// kept finds every way a root on the host could lose or change records
// the checkpoint covers, and names it; a log that only grew since, or
// whose oldest files were archived (the hash file kept), passes.
func TestCheckCheckpointAtStart(t *testing.T) {
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
		_, cp := signedHead(t, l) // the state file keeps this one
		appendN(t, l, 2)          // a crash before the next checkpoint
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
		want   string // in the error; "" = passes
	}{
		{"nothing done", func(*testing.T, setup) {}, ""},
		{"records after the checkpoint edited (verify's to find)", func(t *testing.T, s setup) {
			lines := splitLines(readFile(t, s.files[len(s.files)-1]))
			lines[len(lines)-1] = []byte(strings.Replace(string(lines[len(lines)-1]), `"agent"`, `"agenx"`, 1))
			writeFile(t, s.files[len(s.files)-1], joinLines(lines))
		}, ""},
		{"the oldest file archived, the hash file kept", func(t *testing.T, s setup) {
			_ = os.Remove(s.files[0])
		}, ""},
		{"truncate the tail", func(t *testing.T, s setup) {
			for i, k := len(s.files)-1, 5; k > 0; i-- { // the last 5 records, across files
				n := min(k, len(splitLines(readFile(t, s.files[i]))))
				cutLines(t, s.files[i], n)
				k -= n
			}
		}, "removed from its end"},
		{"delete the newest files", func(t *testing.T, s setup) {
			_ = os.Remove(s.files[len(s.files)-1])
			_ = os.Remove(s.files[len(s.files)-2])
		}, "removed from its end"},
		{"swap two files", func(t *testing.T, s setup) {
			a, b := readFile(t, s.files[1]), readFile(t, s.files[2])
			writeFile(t, s.files[1], b)
			writeFile(t, s.files[2], a)
		}, "were changed"},
		{"edit one record", func(t *testing.T, s setup) {
			b := readFile(t, s.files[1])
			writeFile(t, s.files[1], []byte(strings.Replace(string(b), `"agent"`, `"agenx"`, 1)))
		}, "were changed"},
		{"edit one record, the oldest file archived", func(t *testing.T, s setup) {
			_ = os.Remove(s.files[0])
			b := readFile(t, s.files[2])
			writeFile(t, s.files[2], []byte(strings.Replace(string(b), `"agent"`, `"agenx"`, 1)))
		}, "were changed"},
		{"rewrite a suffix, hash file too", func(t *testing.T, s setup) {
			rewriteFrom(t, s.dir, 20, func(r *Record) { r.Argv = []string{"true"} })
			l := openLog(t, s.dir, newClock(oct)) // a fresh hash file of the new lines
			l.Close()
		}, "were changed"},
		{"the oldest file archived, the hash file deleted", func(t *testing.T, s setup) {
			_ = os.Remove(s.files[0])
			_ = os.Remove(filepath.Join(s.dir, TreeFile))
		}, "oldest files are not in its directory"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := build(t)
			tc.tamper(t, s)
			err := CheckCheckpoint(s.dir, s.cp)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("a false alarm: %v", err)
				}
				return
			}
			var cerr *CheckpointError
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("CheckCheckpoint = %v, want an error naming %q", err, tc.want)
			}
			if tc.want != "oldest files are not in its directory" && (!errors.As(err, &cerr) || !errors.Is(err, ErrCorrupt)) {
				t.Fatalf("CheckCheckpoint = %v, want a *CheckpointError", err)
			}
		})
	}
	if err := CheckCheckpoint(t.TempDir(), Checkpoint{}); err != nil {
		t.Fatalf("an empty checkpoint of an empty log: %v", err)
	}
}
