package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"coily.dev/coily/audit"
	"coily.dev/coily/audit/witness"
	"coily.dev/coily/internal/testlog"
)

// witnessProc is a running `coily witness serve`.
type witnessProc struct {
	cmd *exec.Cmd
	log *testlog.Buffer
	url string
}

var witnessAddr = regexp.MustCompile(`"witness serving" addr=(127\.0\.0\.1:\d+)`)

// startWitness runs `coily witness serve` on a free loopback port.
func startWitness(t *testing.T, dir string, logs ...string) *witnessProc {
	t.Helper()
	return startWitnessAt(t, "127.0.0.1:0", dir, logs...)
}

// startWitnessAt runs `coily witness serve` listening on addr.
func startWitnessAt(t *testing.T, addr, dir string, logs ...string) *witnessProc {
	t.Helper()
	args := []string{"witness", "serve", "--listen", addr, "--state", dir}
	for _, l := range logs {
		args = append(args, "--log", l)
	}
	w := &witnessProc{cmd: exec.Command(coilyBin, args...), log: new(testlog.Buffer)}
	w.cmd.Stdout, w.cmd.Stderr = w.log, w.log
	if err := w.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = w.cmd.Process.Signal(syscall.SIGTERM)
		_ = w.cmd.Wait()
	})
	deadline := time.Now().Add(15 * time.Second)
	for {
		if m := witnessAddr.FindStringSubmatch(w.log.String()); m != nil {
			w.url = "http://" + m[1]
			return w
		}
		if time.Now().After(deadline) {
			t.Fatalf("the witness did not start:\n%s", w.log)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// witnessed is a coily host whose log a real witness holds a checkpoint
// of, newer than an older copy of its state directory.
type witnessed struct {
	dir, old   string // the state directory, and a copy of it before a lockout and a pause
	oldRecords int64  // the records in old's log
	w          *witnessProc
	vkey, wkey string
	origin     string
	wdir       string // the witness's state
	// args are the servers' extra flags (the dev build's rotation size);
	// files is how many files the log has at least, once made.
	args  []string
	files int
}

// newWitnessed runs a server twice without a witness (its key made, then
// a copy of its state kept), then with a witness through a lockout, an
// unlock, a pause, a resume and a restart, until the witness holds its
// every record.
func newWitnessed(t *testing.T) *witnessed {
	t.Helper()
	return newWitnessedWith(t, &witnessed{files: 1})
}

// newWitnessedWith makes h as newWitnessed does, its servers given
// h.args (the first, whose state the older copy is, without them: its
// records all in the oldest file), and adds records until the log has
// h.files files.
func newWitnessedWith(t *testing.T, h *witnessed) *witnessed {
	t.Helper()
	h.dir, h.old = shortDir(t), shortDir(t)
	p := startServe(t, h.dir, examplePolicy(t))
	p.run(t, "exec", "--", "/bin/echo", "one")
	p.stop()
	h.vkey = strings.TrimSpace(runCoily(t, nil, "--state-dir", h.dir, "audit", "key").stdout)
	h.origin, _, _ = strings.Cut(h.vkey, "+")
	wdir := t.TempDir()
	h.wdir = wdir
	h.wkey = strings.TrimSpace(runCoily(t, nil, "witness", "key", "--state", wdir).stdout)
	if !strings.Contains(h.wkey, "/witness+") {
		t.Fatalf("witness key: %q", h.wkey)
	}
	h.w = startWitness(t, wdir, h.origin+"="+h.vkey)
	copyDir(t, h.dir, h.old)
	h.oldRecords = records(t, h.old)

	p = h.serve(t, h.dir)
	p.run(t, "exec", "--", "/bin/echo", "two")
	for _, args := range [][]string{{"lockout", "--reason", "e2e"}, {"unlock"}, {"pause", "--reason", "e2e"}, {"resume"}} {
		if r := p.run(t, args...); r.code != 0 {
			t.Fatalf("%v: %+v", args, r)
		}
	}
	p.run(t, "exec", "--", "/bin/echo", "three")
	for len(logFiles(t, h.dir)) < h.files {
		if r := p.run(t, "exec", "--", "/bin/echo", "more"); r.code != 0 {
			t.Fatalf("exec: %+v", r)
		}
	}
	p.stop()
	// A restart: no false alarm, and the witness catches up.
	p = h.serve(t, h.dir)
	if r := p.run(t, "status"); r.code != 0 || lockedOut.MatchString(r.stdout) {
		t.Fatalf("a restart beside the witness: %+v\n%s", r, p.log)
	}
	h.waitWitnessed(t, p)
	p.stop()
	return h
}

// serve starts a server on dir pushing to the witness.
func (h *witnessed) serve(t *testing.T, dir string) *serveProc {
	t.Helper()
	return startServe(t, dir, examplePolicy(t), append([]string{"--witness", h.w.url + "=" + h.wkey, "--checkpoint-every", "1s"}, h.args...)...)
}

// waitWitnessed waits until the witness holds every record of the
// running server's log.
func (h *witnessed) waitWitnessed(t *testing.T, p *serveProc) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		n := records(t, h.dir)
		msg, err := witness.Fetch(context.Background(), nil, h.w.url, h.origin)
		if err == nil {
			if c, err := audit.OpenCheckpoint(msg, h.vkey); err == nil && c.N == n {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the witness did not take the log's %d records (%v):\n%s\n%s", n, err, msg, p.log)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (h *witnessed) verify(t *testing.T, dir string) cliRun {
	t.Helper()
	return runCoily(t, nil, "--state-dir", dir, "audit", "verify", "--checkpoint", h.w.url, "--key", h.vkey, "--witness-key", h.wkey)
}

// records is how many records the log in dir holds.
func records(t *testing.T, dir string) int64 {
	t.Helper()
	last, err := audit.Tail(filepath.Join(dir, "audit"), 1)
	if err != nil || len(last) != 1 {
		t.Fatalf("the log's last record: %v %v", last, err)
	}
	return int64(last[0].Seq)
}

// logFiles is the audit log's files in dir, oldest first (YYYY-MM.jsonl
// before YYYY-MM.0001.jsonl).
func logFiles(t *testing.T, dir string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "audit", "*.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	order := func(path string) string {
		month, part, _ := strings.Cut(strings.TrimSuffix(filepath.Base(path), ".jsonl"), ".")
		return month + "." + fmt.Sprintf("%04s", part)
	}
	slices.SortFunc(files, func(a, b string) int { return strings.Compare(order(a), order(b)) })
	return files
}

func copyDir(t *testing.T, from, to string) {
	t.Helper()
	if out, err := exec.Command("cp", "-a", from+"/.", to).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v %s", err, out)
	}
}

// TestCLIWitnessDetectsLostRecords: a coily serve pushes its checkpoints
// to a real coily witness serve; restarts raise no alarm and `audit
// verify --checkpoint URL` passes with the witness's cosignature. Then,
// on a copy of the state directory each time, what one who can write it
// may do to hide records the witness saw is found by `audit verify
// --checkpoint URL`, and the server comes up locked out, naming the
// witness: the log's tail cut, one record edited (its hash file
// dropped, so that the tree is the lines'), and an older state file put
// back with the log cut back to match it (the lockout and the pause in
// the lost part: the state file alone sees nothing).
func TestCLIWitnessDetectsLostRecords(t *testing.T) {
	h := newWitnessed(t)
	if r := h.verify(t, h.dir); r.code != 0 || !strings.Contains(r.stdout, "cosigned by the witness") {
		t.Fatalf("verify against the witness: %+v", r)
	}
	// A replayed older cosignature is refused with --max-age.
	if r := runCoily(t, nil, "--state-dir", h.dir, "audit", "verify", "--checkpoint", h.w.url, "--key", h.vkey, "--witness-key", h.wkey, "--max-age", "1ns"); r.code != 1 || !strings.Contains(r.stderr, "more than --max-age") {
		t.Fatalf("verify --max-age 1ns: %+v", r)
	}
	if r := runCoily(t, nil, "--state-dir", h.dir, "audit", "verify", "--checkpoint", h.w.url, "--key", h.vkey, "--witness-key", h.wkey, "--max-age", "1h"); r.code != 0 || !strings.Contains(r.stdout, "the checkpoint's size") {
		t.Fatalf("verify --max-age 1h: %+v", r)
	}
	if r := runCoily(t, nil, "--state-dir", h.dir, "audit", "verify", "--checkpoint", h.w.url, "--key", h.vkey, "--witness-key", h.vkey); r.code != 1 {
		t.Fatalf("verify with the log's key as the witness's: %+v", r)
	}
	cases := []struct {
		name   string
		tamper func(t *testing.T, dir string)
		found  string // what audit verify says
		// refuses is what a server that refuses to start says (a
		// modified line: the stop state it records cannot be read);
		// "" when it comes up locked out.
		refuses string
	}{
		{"the tail cut", func(t *testing.T, dir string) { cutBack(t, dir, records(t, dir)-3) }, "removed from its end", ""},
		{"one record edited", func(t *testing.T, dir string) {
			path := newestLogFile(t, dir)
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			edited := strings.Replace(string(data), `"reason":"e2e"`, `"reason":"e3e"`, 1)
			if edited == string(data) {
				t.Fatal("no record to edit")
			}
			if err := os.WriteFile(path, []byte(edited), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Remove(filepath.Join(dir, "audit", audit.TreeFile)); err != nil {
				t.Fatal(err)
			}
		}, "FAILED", "line was modified"},
		{"an older state restored, the log cut back", func(t *testing.T, dir string) {
			if err := os.Remove(filepath.Join(dir, "coily.db")); err != nil {
				t.Fatal(err)
			}
			copyDir(t, h.old, dir)
		}, "removed from its end", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := shortDir(t)
			copyDir(t, h.dir, dir)
			tc.tamper(t, dir)
			if r := h.verify(t, dir); r.code != 1 || !strings.Contains(r.stderr, tc.found) {
				t.Fatalf("verify: %+v", r)
			}
			if tc.refuses != "" {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				out, err := exec.CommandContext(ctx, coilyBin, "serve", "--state-dir", dir, "--policy", examplePolicy(t),
					"--witness", h.w.url+"="+h.wkey).CombinedOutput()
				if err == nil || ctx.Err() != nil || !strings.Contains(string(out), tc.refuses) || !strings.Contains(string(out), "a witness refused") {
					t.Fatalf("serve: %v\n%s", err, out)
				}
				return
			}
			p := h.serve(t, dir)
			if r := p.run(t, "status"); !lockedOut.MatchString(r.stdout) || !strings.Contains(r.stdout, h.w.url) {
				t.Fatalf("status at start: %+v\n%s", r, p.log)
			}
		})
	}
}

// TestCLIWitnessUnsignedRefusalIsAnOutage: whoever answers at a
// witness's address (plain http: a spoofer, a misconfigured proxy) and
// refuses the checkpoint (409 "1000", a bare 409, a 422) with nothing
// signed does not lock the server out: it comes up unlocked, and the
// witness's outage is audited once.
func TestCLIWitnessUnsignedRefusalIsAnOutage(t *testing.T) {
	_, wkey, err := witness.GenerateKey("stub/witness")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, ctype, body string
		status            int
	}{
		{"409 sized", witness.SizeType, "1000\n", http.StatusConflict},
		{"bare 409", "text/plain", "no", http.StatusConflict},
		{"422", "text/plain", "no", http.StatusUnprocessableEntity},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stub := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method == http.MethodGet {
					http.NotFound(w, r)
					return
				}
				w.Header().Set("Content-Type", tc.ctype)
				w.WriteHeader(tc.status)
				_, _ = w.Write([]byte(tc.body))
			}))
			defer stub.Close()
			dir := shortDir(t)
			p := startServe(t, dir, examplePolicy(t), "--witness", stub.URL+"="+wkey, "--checkpoint-every", "1s")
			if r := p.run(t, "status"); r.code != 0 || lockedOut.MatchString(r.stdout) {
				t.Fatalf("status at start: %+v\n%s", r, p.log)
			}
			// The pusher reports an outage after its tries (5, backing
			// off from a second: 15 s and more under load).
			deadline := time.Now().Add(90 * time.Second)
			for {
				recs, err := audit.TailMatching(filepath.Join(dir, "audit"), 100, func(r audit.Record) bool { return r.Event == audit.EventWitness })
				if err != nil {
					t.Fatal(err)
				}
				if len(recs) > 0 {
					if len(recs) != 1 || recs[0].Details["state"] != "outage" {
						t.Fatalf("witness records: %+v", recs)
					}
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("no audit.witness outage record:\n%s", p.log)
				}
				time.Sleep(50 * time.Millisecond)
			}
			if r := p.run(t, "status"); r.code != 0 || lockedOut.MatchString(r.stdout) {
				t.Fatalf("status after the outage: %+v\n%s", r, p.log)
			}
		})
	}
}

// TestCLIWitnessWipedStateLocksOut: the state file and the log removed,
// the next start makes a new log key; the witness refuses its checkpoint
// (not signed by the pinned key) and holds one it cosigned of the same
// origin under the former key: the server comes up locked out, naming
// the witness.
func TestCLIWitnessWipedStateLocksOut(t *testing.T) {
	h := newWitnessed(t)
	dir := shortDir(t)
	copyDir(t, h.dir, dir)
	for _, name := range []string{"coily.db", "audit"} {
		if err := os.RemoveAll(filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	p := h.serve(t, dir)
	if r := p.run(t, "status"); !lockedOut.MatchString(r.stdout) || !strings.Contains(r.stdout, h.w.url) || !strings.Contains(r.stdout, "another key") {
		t.Fatalf("status at start: %+v\n%s", r, p.log)
	}
}

// TestCLIWitnessRefusalWhileRunningLocksOut: a witness down when the
// server starts that answers later with a proven refusal (an older state file put back with the
// log cut back to match) locks the running server out, as at start.
func TestCLIWitnessRefusalWhileRunningLocksOut(t *testing.T) {
	h := newWitnessed(t)
	dir := shortDir(t)
	copyDir(t, h.dir, dir)
	// An older state file put back, the log cut back to match it: only
	// the witness sees it.
	if err := os.Remove(filepath.Join(dir, "coily.db")); err != nil {
		t.Fatal(err)
	}
	copyDir(t, h.old, dir)
	_ = h.w.cmd.Process.Signal(syscall.SIGTERM)
	_ = h.w.cmd.Wait()
	p := h.serve(t, dir)
	if r := p.run(t, "status"); r.code != 0 || lockedOut.MatchString(r.stdout) {
		t.Fatalf("status at start, the witness down: %+v\n%s", r, p.log)
	}
	startWitnessAt(t, strings.TrimPrefix(h.w.url, "http://"), h.wdir, h.origin+"="+h.vkey)
	deadline := time.Now().Add(60 * time.Second)
	for {
		p.run(t, "exec", "--", "/bin/echo", "more") // records: a newer checkpoint to push
		r := p.run(t, "status")
		if lockedOut.MatchString(r.stdout) {
			if !strings.Contains(r.stdout, "a witness refused") {
				t.Fatalf("the lockout's reason: %+v", r)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not locked out after the witness refused: %+v\n%s", r, p.log)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
