package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"coily.dev/coily/audit"
)

// TestCLIAuditCheckpointWitnessed: a real server signs a checkpoint right
// after a lockout; a witness keeps a copy and the owner pins the key.
// After more records, a restart and a repaired torn tail, `audit verify
// --checkpoint` with that copy passes (no false alarm), a record's proof
// checks with the pinned key alone; a log cut back before the lockout, or
// a checkpoint under another key, fails.
func TestCLIAuditCheckpointWitnessed(t *testing.T) {
	dir := shortDir(t)
	p := startServe(t, dir, examplePolicy(t))
	p.run(t, "exec", "--", "/bin/echo", "one")
	if r := p.run(t, "lockout", "--reason", "e2e"); r.code != 0 {
		t.Fatalf("lockout: %+v", r)
	}
	global := []string{"--state-dir", dir}
	key := runCoily(t, nil, append(global, "audit", "key")...)
	vkey := strings.TrimSpace(key.stdout)
	if key.code != 0 || !strings.HasPrefix(vkey, "coily/") {
		t.Fatalf("audit key: %+v", key)
	}
	signed, err := os.ReadFile(filepath.Join(dir, "audit", audit.CheckpointFile))
	if err != nil {
		t.Fatal(err)
	}
	cp, err := audit.OpenCheckpoint(signed, vkey)
	if err != nil {
		t.Fatal(err)
	}
	last, err := audit.Tail(filepath.Join(dir, "audit"), 1)
	if err != nil || last[0].Event != audit.EventLockout || cp.N != int64(last[0].Seq) {
		t.Fatalf("the checkpoint after the lockout covers %d records; the log's last is %+v (%v)", cp.N, last, err)
	}
	witness := filepath.Join(t.TempDir(), "witnessed")
	if err := os.WriteFile(witness, signed, 0o600); err != nil {
		t.Fatal(err)
	}
	p.run(t, "unlock")
	p.run(t, "exec", "--", "/bin/echo", "two")
	p.stop()
	p = startServe(t, dir, examplePolicy(t))
	p.run(t, "exec", "--", "/bin/echo", "three")
	p.stop()

	// A torn tail, repaired: a new checkpoint, and no alarm.
	f, err := os.OpenFile(newestLogFile(t, dir), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = f.WriteString(`{"id":"A0000`)
	f.Close()
	if r := runCoily(t, nil, append(global, "audit", "repair")...); r.code != 0 || !strings.Contains(r.stdout, "signed a checkpoint of the repaired log") {
		t.Fatalf("repair: %+v", r)
	}
	verify := append(global, "audit", "verify", "--checkpoint", witness, "--key", vkey)
	if r := runCoily(t, nil, verify...); r.code != 0 || !strings.Contains(r.stdout, "holds exactly the") {
		t.Fatalf("verify against the witnessed checkpoint: %+v", r)
	}

	proof := runCoily(t, nil, append(global, "audit", "prove", "A000000000002")...)
	if proof.code != 0 {
		t.Fatalf("prove: %+v", proof)
	}
	proofFile := filepath.Join(t.TempDir(), "proof")
	if err := os.WriteFile(proofFile, []byte(proof.stdout), 0o600); err != nil {
		t.Fatal(err)
	}
	if r := runCoily(t, nil, "audit", "prove", "--check", proofFile, "--key", vkey); r.code != 0 || !strings.Contains(r.stdout, "proof OK: record A000000000002") {
		t.Fatalf("prove --check: %+v", r)
	}
	check := []string{"audit", "prove", "--check", proofFile, "--key", vkey, "--id"}
	if r := runCoily(t, nil, append(check, "A000000000002")...); r.code != 0 || !strings.Contains(r.stdout, "proof OK: record A000000000002") {
		t.Fatalf("prove --check --id of its record: %+v", r)
	}
	if r := runCoily(t, nil, append(check, "A000000000003")...); r.code != 1 || !strings.Contains(r.stderr, "the proof is of record A000000000002, not A000000000003") {
		t.Fatalf("prove --check --id of another record: %+v", r)
	}
	if r := runCoily(t, nil, append(check, "A3")...); r.code != 2 {
		t.Fatalf("prove --check --id A3: %+v", r)
	}

	_, otherKey, _ := audit.GenerateSigner(cp.Origin)
	if r := runCoily(t, nil, append(global, "audit", "verify", "--checkpoint", witness, "--key", otherKey)...); r.code != 1 || !strings.Contains(r.stderr, "not signed by") {
		t.Fatalf("verify with another key: %+v", r)
	}
	if r := runCoily(t, nil, "audit", "prove", "--check", proofFile, "--key", otherKey); r.code != 1 {
		t.Fatalf("prove --check with another key: %+v", r)
	}

	// Cut the log back to before the lockout: the witness's checkpoint
	// names it, whatever the state file says.
	cutBack(t, dir, cp.N-1)
	if r := runCoily(t, nil, verify...); r.code != 1 || !strings.Contains(r.stderr, "removed from its end") {
		t.Fatalf("verify of a log cut before the lockout: %+v", r)
	}
}

func newestLogFile(t *testing.T, dir string) string {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, "audit", "*.jsonl"))
	if len(files) == 0 {
		t.Fatal("no audit file")
	}
	return files[len(files)-1]
}

// cutBack keeps the first n records of the (one-file) log.
func cutBack(t *testing.T, dir string, n int64) {
	t.Helper()
	path := newestLogFile(t, dir)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitAfter(string(data), "\n")
	if err := os.WriteFile(path, []byte(strings.Join(lines[:n], "")), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestCLIAuditNewKeyRecorded: the first start records its checkpoint key
// in the log; a lost state file makes a new key, and that start records
// it too, naming the key it replaces, before the first checkpoint under
// it (which covers the record).
func TestCLIAuditNewKeyRecorded(t *testing.T) {
	dir := shortDir(t)
	p := startServe(t, dir, examplePolicy(t))
	p.stop()
	global := []string{"--state-dir", dir}
	first := strings.TrimSpace(runCoily(t, nil, append(global, "audit", "key")...).stdout)
	keys := func() []audit.Record {
		t.Helper()
		recs, err := audit.TailMatching(filepath.Join(dir, "audit"), 10, func(r audit.Record) bool { return r.Event == audit.EventKey })
		if err != nil {
			t.Fatal(err)
		}
		return recs
	}
	if k := keys(); len(k) != 1 || k[0].Details["verifier"] != first || k[0].Details["new"] != "true" || k[0].Details["replaces"] != "" {
		t.Fatalf("the first start's key records: %+v (key %s)", k, first)
	}

	if err := os.Remove(filepath.Join(dir, "coily.db")); err != nil {
		t.Fatal(err)
	}
	p = startServe(t, dir, examplePolicy(t))
	p.stop()
	second := strings.TrimSpace(runCoily(t, nil, append(global, "audit", "key")...).stdout)
	k := keys()
	if second == first || len(k) != 2 || k[1].Details["verifier"] != second || k[1].Details["replaces"] != first || k[1].Details["new"] != "true" {
		t.Fatalf("after a lost state file: key %s, records %+v", second, k)
	}
	signed, err := os.ReadFile(filepath.Join(dir, "audit", audit.CheckpointFile))
	if err != nil {
		t.Fatal(err)
	}
	cp, err := audit.OpenCheckpoint(signed, second)
	if err != nil || cp.N < int64(k[1].Seq) {
		t.Fatalf("the checkpoint under the new key covers %d records, the key's record is %d (%v)", cp.N, k[1].Seq, err)
	}
	// Off the host: only the log's lines, copied, and the pinned key.
	copied := filepath.Join(t.TempDir(), "audit")
	if err := os.Mkdir(copied, 0o700); err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "audit", "*.jsonl"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(copied, filepath.Base(f)), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	witness := filepath.Join(t.TempDir(), "checkpoint")
	if err := os.WriteFile(witness, signed, 0o600); err != nil {
		t.Fatal(err)
	}
	r := runCoily(t, nil, "--state-dir", filepath.Dir(copied), "audit", "verify", "--checkpoint", witness, "--key", second)
	if r.code != 0 || !strings.Contains(r.stdout, "holds exactly the") || !strings.Contains(r.stdout, "its lines alone were checked") {
		t.Fatalf("verify off the host: %+v", r)
	}
}
