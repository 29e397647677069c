package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// serveFails runs `coily serve` on dir and expects it to refuse to start.
func serveFails(t *testing.T, dir string) string {
	t.Helper()
	out, err := exec.Command(coilyBin, "serve", "--state-dir", dir, "--policy", examplePolicy(t)).CombinedOutput()
	if err == nil {
		t.Fatalf("serve started on a damaged state:\n%s", out)
	}
	return string(out)
}

var lockedOut = regexp.MustCompile(`(?m)^lockout:\s+ACTIVE`)

// A damaged state file: the server refuses to start, naming the file and
// the way out; `state check` says what is wrong; `state rebuild` keeps the
// file aside and starts the server locked out.
func TestCLIDamagedStateFile(t *testing.T) {
	dir := shortDir(t)
	p := startServe(t, dir, examplePolicy(t))
	if r := p.run(t, "exec", "--", "/bin/echo", "hi"); r.code != 0 {
		t.Fatalf("exec: %+v", r)
	}
	p.stop()
	db := filepath.Join(dir, "coily.db")
	fi, err := os.Stat(db)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(db, make([]byte, fi.Size()), 0o600); err != nil { // zeroed
		t.Fatal(err)
	}
	if out := serveFails(t, dir); !strings.Contains(out, db) || !strings.Contains(out, "coily state rebuild") || strings.Contains(out, "panic") {
		t.Fatalf("serve on a zeroed state file:\n%s", out)
	}
	if r := runCoily(t, nil, "state", "check", "--state-dir", dir); r.code != 1 || !strings.Contains(r.stdout, "damaged") {
		t.Fatalf("state check: %+v", r)
	}
	r := runCoily(t, nil, "state", "rebuild", "--state-dir", dir)
	if r.code != 0 || !strings.Contains(r.stdout, "coily.db.damaged-") {
		t.Fatalf("state rebuild: %+v", r)
	}
	if matches, _ := filepath.Glob(db + ".damaged-*"); len(matches) != 1 {
		t.Fatalf("the damaged file was not kept aside: %v", matches)
	}
	p = startServe(t, dir, examplePolicy(t))
	if r := p.run(t, "status"); !lockedOut.MatchString(r.stdout) || !strings.Contains(r.stdout, "state rebuilt") {
		t.Fatalf("status after rebuild: %+v", r)
	}
	if r := p.run(t, "unlock", "--reason", "checked"); r.code != 0 {
		t.Fatalf("unlock: %+v", r)
	}
	if r := p.run(t, "exec", "--", "/bin/echo", "again"); r.code != 0 {
		t.Fatalf("exec after unlock: %+v", r)
	}
	p.stop()
	if r := runCoily(t, nil, "audit", "verify", "--state-dir", dir); r.code != 0 {
		t.Fatalf("verify: %+v", r)
	}
}

// A torn last audit line: the server refuses to start until `audit repair`
// cuts it (and records that it did); verify accepts the repaired log.
func TestCLITornAuditLog(t *testing.T) {
	dir := shortDir(t)
	p := startServe(t, dir, examplePolicy(t))
	p.run(t, "exec", "--", "/bin/echo", "hi")
	p.stop()
	files, _ := filepath.Glob(filepath.Join(dir, "audit", "*.jsonl"))
	f, err := os.OpenFile(files[len(files)-1], os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(`{"id":"A000000000099","seq":9`)
	f.Close()
	if out := serveFails(t, dir); !strings.Contains(out, "coily audit repair --state-dir "+dir) {
		t.Fatalf("serve on a torn log:\n%s", out)
	}
	r := runCoily(t, nil, "audit", "repair", "--state-dir", dir)
	if r.code != 0 || !strings.Contains(r.stdout, "cut 29 bytes") {
		t.Fatalf("repair: %+v", r)
	}
	if r := runCoily(t, nil, "audit", "verify", "--state-dir", dir); r.code != 0 {
		t.Fatalf("verify after repair: %+v", r)
	}
	if r := runCoily(t, nil, "audit", "tail", "-n", "1", "--state-dir", dir); !strings.Contains(r.stdout, "audit.repair") {
		t.Fatalf("the repair is not on record: %+v", r)
	}
	p = startServe(t, dir, examplePolicy(t))
	if r := p.run(t, "exec", "--", "/bin/echo", "hi"); r.code != 0 {
		t.Fatalf("exec after repair: %+v", r)
	}
}

// `state rebuild` and `audit repair` never run beside a live server: they
// take the state directory's lock, exit 3 naming the holder, and change
// nothing (a rebuild would otherwise move coily.db aside under the server,
// which would carry on with the old file while the next start saw a new one).
func TestCLIRepairsRefuseBesideARunningServer(t *testing.T) {
	dir := shortDir(t)
	p := startServe(t, dir, examplePolicy(t))
	before := dirSnapshot(t, dir)
	for _, args := range [][]string{{"state", "rebuild"}, {"audit", "repair"}} {
		r := runCoily(t, nil, append(args, "--state-dir", dir)...)
		if r.code != exitStateDirBusy || !strings.Contains(r.stderr, "held by another coily") {
			t.Fatalf("%v beside a running server: %+v", args, r)
		}
	}
	if after := dirSnapshot(t, dir); after != before {
		t.Fatalf("the state directory changed:\n%s\nwas\n%s", after, before)
	}
	if r := p.run(t, "status"); r.code != 0 || lockedOut.MatchString(r.stdout) {
		t.Fatalf("the server after: %+v", r)
	}
}

// dirSnapshot lists the names and sizes of the state directory's files,
// but the audit log's (the server appends to it).
func dirSnapshot(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || strings.Contains(path, "/audit/") {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "%s %d\n", strings.TrimPrefix(path, dir), fi.Size())
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// Records cut off the audit log's end leave a log that verifies on its
// own: `audit verify` and `state check` compare it with the head the state
// file recorded and fail, naming both; the server starts locked out.
func TestCLIShortAuditLog(t *testing.T) {
	dir := shortDir(t)
	p := startServe(t, dir, examplePolicy(t))
	p.run(t, "exec", "--", "/bin/echo", "hi")
	if r := p.run(t, "lockout", "--reason", "drill"); r.code != 0 {
		t.Fatalf("lockout: %+v", r)
	}
	p.stop()
	if r := runCoily(t, nil, "audit", "verify", "--state-dir", dir); r.code != 0 || !strings.Contains(r.stdout, "it holds the head the state file recorded") {
		t.Fatalf("verify before the cut: %+v", r)
	}
	// Cut the log back to before the lockout, as one who can write the
	// state directory could.
	files, _ := filepath.Glob(filepath.Join(dir, "audit", "*.jsonl"))
	data, err := os.ReadFile(files[0])
	if err != nil || len(files) != 1 {
		t.Fatalf("%v %v", files, err)
	}
	at := strings.Index(string(data), `"event":"lockout"`)
	if at < 0 {
		t.Fatal("no lockout record")
	}
	if err := os.Truncate(files[0], int64(strings.LastIndexByte(string(data[:at]), '\n')+1)); err != nil {
		t.Fatal(err)
	}
	r := runCoily(t, nil, "audit", "verify", "--state-dir", dir)
	if r.code != 1 || !strings.Contains(r.stderr, "FAILED: audit: the log ends at record") || !strings.Contains(r.stderr, "records were removed from its end") {
		t.Fatalf("verify of the short log: %+v", r)
	}
	r = runCoily(t, nil, "audit", "verify", "--json", "--state-dir", dir)
	if r.code != 1 || !strings.Contains(r.stdout, `"ok":false`) || !strings.Contains(r.stdout, `"recorded_head":{`) {
		t.Fatalf("verify --json of the short log: %+v", r)
	}
	r = runCoily(t, nil, "state", "check", "--state-dir", dir)
	if r.code != 1 || !strings.Contains(r.stdout, "FAIL audit: the log ends at record") {
		t.Fatalf("state check of the short log: %+v", r)
	}
	p = startServe(t, dir, examplePolicy(t))
	if r := p.run(t, "status"); !lockedOut.MatchString(r.stdout) || !strings.Contains(r.stdout, "records were removed") {
		t.Fatalf("status after the cut: %+v", r)
	}
	// Beside the running server (which holds the state file), verify
	// checks the chain and says it could not read the head.
	if r := runCoily(t, nil, "audit", "verify", "--state-dir", dir); r.code != 0 || !strings.Contains(r.stdout, "recorded head was not checked") {
		t.Fatalf("verify beside the server: %+v", r)
	}
}
