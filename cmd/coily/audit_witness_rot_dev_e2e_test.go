//go:build coilydev

package main

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"coily.dev/coily/audit"
	"coily.dev/coily/audit/witness"
)

// rotateAt is the audit log's file size the dev build's servers rotate
// at here (--dev-audit-max-file-size): a file every few commands.
var rotateAt = []string{"--dev-audit-max-file-size", "2048"}

// swapFiles exchanges the contents of two of the log's files.
func swapFiles(t *testing.T, a, b string) {
	t.Helper()
	da, err := os.ReadFile(a)
	if err != nil {
		t.Fatal(err)
	}
	db, err := os.ReadFile(b)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(a, db, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(b, da, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestCLIWitnessDetectsRotatedLogTampering: a real coily serve whose
// audit log rotated (5 files and more) pushes its checkpoints to a real
// coily witness serve. On a copy of the state directory each time, the
// newest file deleted, or two files swapped, is found by `audit verify
// --checkpoint URL` (exit 1, a sentence naming what disagrees), and the
// server comes up locked out naming the witness, the sizes and the
// repair: with the state file as it was, and with an older state file
// put back, whose checkpoint the damaged log still holds (only the
// witness sees it then).
func TestCLIWitnessDetectsRotatedLogTampering(t *testing.T) {
	h := newWitnessedWith(t, &witnessed{args: rotateAt, files: 5})
	if r := h.verify(t, h.dir); r.code != 0 || !strings.Contains(r.stdout, "cosigned by the witness") {
		t.Fatalf("verify against the witness: %+v", r)
	}
	n := records(t, h.dir)
	files := len(logFiles(t, h.dir))
	cases := []struct {
		name   string
		tamper func(t *testing.T, files []string)
		found  string // what audit verify says
	}{
		{"the newest file deleted", func(t *testing.T, files []string) {
			if err := os.Remove(files[len(files)-1]); err != nil {
				t.Fatal(err)
			}
		}, "removed from its end"},
		{"two files swapped", func(t *testing.T, files []string) { swapFiles(t, files[1], files[2]) }, "chain broken"},
		{"the oldest two files swapped", func(t *testing.T, files []string) { swapFiles(t, files[0], files[1]) }, "chain broken"},
	}
	for _, tc := range cases {
		for _, older := range []bool{false, true} {
			name := tc.name
			if older {
				name += ", an older state file put back"
			}
			t.Run(name, func(t *testing.T) {
				dir := shortDir(t)
				copyDir(t, h.dir, dir)
				if older {
					db, err := os.ReadFile(filepath.Join(h.old, "coily.db"))
					if err != nil {
						t.Fatal(err)
					}
					if err := os.WriteFile(filepath.Join(dir, "coily.db"), db, 0o600); err != nil {
						t.Fatal(err)
					}
				}
				tc.tamper(t, logFiles(t, dir))
				r := h.verify(t, dir)
				if r.code != 1 || !strings.Contains(r.stderr, tc.found) {
					t.Fatalf("verify: %+v", r)
				}
				p := h.serve(t, dir)
				st := p.run(t, "status")
				if !lockedOut.MatchString(st.stdout) {
					t.Fatalf("not locked out at start (%d records in %d files): %+v\n%s", n, files, st, p.log)
				}
				// The witness, the size it holds and the repair.
				for _, want := range []string{h.w.url, strconv.FormatInt(n, 10) + " records", "coily witness forget"} {
					if !strings.Contains(st.stdout, want) {
						t.Fatalf("status at start (%d records in %d files): no %q: %+v\n%s", n, files, want, st, p.log)
					}
				}
			})
		}
	}
}

// TestCLIWitnessNoFalseAlarmsOverRotations: a normal run beside a real
// witness — many records across rotations, a lockout and an unlock, a
// pause and a resume, clean restarts, a restart after SIGKILL, and a
// torn tail mended by `coily audit repair` — raises no alarm: every start
// comes up open, the witness takes every checkpoint (no audit.witness
// record, no refusal logged, it holds the log's every record at the end)
// and `audit verify --checkpoint URL` passes.
func TestCLIWitnessNoFalseAlarmsOverRotations(t *testing.T) {
	h := newWitnessedWith(t, &witnessed{args: rotateAt, files: 2})
	open := func(p *serveProc, when string) {
		t.Helper()
		if r := p.run(t, "status"); r.code != 0 || lockedOut.MatchString(r.stdout) || strings.Contains(r.stdout, "pause:       ACTIVE") {
			t.Fatalf("%s: %+v\n%s", when, r, p.log)
		}
	}
	for round := range 4 {
		p := h.serve(t, h.dir)
		open(p, "start "+strconv.Itoa(round))
		before := len(logFiles(t, h.dir))
		for len(logFiles(t, h.dir)) < before+1 {
			if r := p.run(t, "exec", "--", "/bin/echo", "round"); r.code != 0 {
				t.Fatalf("exec: %+v", r)
			}
		}
		for _, args := range [][]string{{"lockout", "--reason", "e2e"}, {"unlock"}, {"pause", "--reason", "e2e"}, {"resume"}} {
			if r := p.run(t, args...); r.code != 0 {
				t.Fatalf("%v: %+v", args, r)
			}
		}
		p.run(t, "exec", "--", "/bin/echo", "after")
		switch round {
		case 1: // killed: no last checkpoint, records after the last one
			h.waitWitnessed(t, p)
			p.run(t, "exec", "--", "/bin/echo", "unwitnessed")
			if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			_ = p.cmd.Wait()
		case 2: // a torn tail, repaired (a crash mid-line)
			p.stop()
			files := logFiles(t, h.dir)
			f, err := os.OpenFile(files[len(files)-1], os.O_APPEND|os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = f.WriteString(`{"seq":`)
			f.Close()
			if r := runCoily(t, nil, "--state-dir", h.dir, "audit", "repair"); r.code != 0 || !strings.Contains(r.stdout, "signed a checkpoint") {
				t.Fatalf("audit repair: %+v", r)
			}
		default:
			p.stop()
		}
	}
	p := h.serve(t, h.dir)
	open(p, "the last start")
	h.waitWitnessed(t, p)
	p.stop()
	if n := len(logFiles(t, h.dir)); n < 6 {
		t.Fatalf("%d audit files: want rotations", n)
	}
	recs, err := audit.TailMatching(filepath.Join(h.dir, "audit"), 1<<20, func(r audit.Record) bool {
		return r.Event == audit.EventWitness || r.Event == audit.EventStateRestore
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 0 {
		t.Fatalf("a false alarm: %+v", recs)
	}
	if strings.Contains(h.w.log.String(), "refus") {
		t.Fatalf("the witness refused a checkpoint:\n%s", h.w.log)
	}
	msg, err := witness.Fetch(context.Background(), nil, h.w.url, h.origin)
	if err != nil {
		t.Fatal(err)
	}
	if c, err := audit.OpenCheckpoint(msg, h.vkey); err != nil || c.N != records(t, h.dir) {
		t.Fatalf("the witness's checkpoint: %+v %v (the log: %d)", c, err, records(t, h.dir))
	}
	if r := h.verify(t, h.dir); r.code != 0 || !strings.Contains(r.stdout, "cosigned by the witness") {
		t.Fatalf("verify against the witness: %+v", r)
	}
}
