package witness

import (
	"os"
	"path/filepath"
	"testing"

	"coily.dev/coily/audit"
	coilyv1 "coily.dev/coily/proto/coily/v1"
	refusals "coily.dev/coily/refusal"
)

// AddBody answers the log's checkpoint file with the proof, from its hash
// file, from the size asked: a witness holding that size takes it; a
// larger size gets no proof (the witness refuses); a negative one is a
// bad request; no checkpoint file is an error, never an empty answer.
func TestAddBodyFromTheLogsFiles(t *testing.T) {
	dir := t.TempDir()
	if _, err := AddBody(dir, 0); err == nil {
		t.Fatal("an answer without a checkpoint file")
	}
	l := newMemLog(t, "coily/a")
	if err := audit.WriteCheckpoint(dir, l.sign(t, 10)); err != nil {
		t.Fatal(err)
	}
	var hashes []byte
	for _, h := range l.hashes {
		hashes = append(hashes, h[:]...)
	}
	if err := os.WriteFile(filepath.Join(dir, audit.TreeFile), hashes, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := AddBody(dir, -1); refusals.As(err).Code != refusals.BadRequest {
		t.Fatalf("old -1: %v", err)
	}
	for _, old := range []int64{0, 1, 4, 9, 10, 11} {
		body, err := AddBody(dir, old)
		if err != nil {
			t.Fatalf("old %d: %v", old, err)
		}
		req, err := ParseAddRequest(body)
		if err != nil || req.Old != old {
			t.Fatalf("old %d: %+v %v", old, req, err)
		}
		s, _ := newWitness(t, t.TempDir(), l)
		if old > 0 && old <= 10 {
			if _, err := s.Add(AddRequest{Checkpoint: must(t)(audit.SignCheckpoint(l.skey, l.tree(t, old)))}.Format()); err != nil {
				t.Fatal(err)
			}
		}
		_, err = s.Add(body)
		if (err == nil) != (old <= 10) {
			t.Fatalf("old %d: the witness answered %v", old, err)
		}
	}
}

// AnswerPull answers the checkpoint to a request pinning this log's
// origin (or none) and only the origin to one pinning another log (each
// server of a fleet keeps its own): never another log's checkpoint, which
// the witness would refuse as lost records.
func TestAnswerPullNotThisLog(t *testing.T) {
	dir := t.TempDir()
	l := newMemLog(t, "coily/a")
	if err := audit.WriteCheckpoint(dir, l.sign(t, 0)); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		origin string
		body   bool
	}{{"", true}, {"coily/a", true}, {"coily/b", false}, {"coily/a ", false}, {"coily/", false}} {
		r, err := AnswerPull(dir, &coilyv1.AuditCheckpointRequest{Origin: tc.origin})
		if err != nil {
			t.Fatalf("origin %q: %v", tc.origin, err)
		}
		if r.GetLogOrigin() != "coily/a" || (len(r.GetAddCheckpoint()) > 0) != tc.body {
			t.Fatalf("origin %q: answered %q with %d bytes", tc.origin, r.GetLogOrigin(), len(r.GetAddCheckpoint()))
		}
	}
	if _, err := AnswerPull(dir, &coilyv1.AuditCheckpointRequest{Old: -1, Origin: "coily/b"}); refusals.As(err).Code != refusals.BadRequest {
		t.Fatalf("old -1: %v", err)
	}
}
