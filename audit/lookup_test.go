package audit

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
)

// approvalLog writes the records of one request that waited for an
// approval (approval.request, the decision, exec.decision, exec.result),
// a refused decision of another approval and a record of another request.
func approvalLog(t *testing.T) (dir string, recs []Record) {
	t.Helper()
	dir = t.TempDir()
	l := openLog(t, dir, newClock(oct))
	const req, appr = "9f0c0c1e-2f4b-4b8e-9b57-2b9f0e7f4a11", "5b1d8a4e-33c2-4f0e-8d7a-0c6f5e2a9b10"
	for _, r := range []Record{
		{Event: "exec.decision", RequestID: "other-request", Decision: "allow"},
		{Event: "approval.request", RequestID: req, Details: map[string]string{"approval_id": appr}},
		{Event: "approval.decide", RequestID: req, Decision: "allow", Details: map[string]string{"approval_id": appr, "verdict": "VERDICT_APPROVE"}},
		{Event: "approval.decide", Decision: "refuse", Code: "not-found", Details: map[string]string{"approval_id": "no-such-approval"}},
		{Event: "exec.decision", RequestID: req, Decision: "allow", Details: map[string]string{"approval_id": appr, "approved_by": "owner"}},
		{Event: "exec.result", RequestID: req, Decision: "allow", Details: map[string]string{"approval_id": appr, "approved_by": "owner"}},
	} {
		out, err := l.Append(context.Background(), r)
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, out)
	}
	return dir, recs
}

func events(recs []Record) string {
	var out []string
	for _, r := range recs {
		out = append(out, r.ID+" "+r.Event)
	}
	return strings.Join(out, ", ")
}

func TestLookupByAuditRequestAndApprovalID(t *testing.T) {
	dir, recs := approvalLog(t)
	request := slices.Concat(recs[1:3], recs[4:])
	for _, tc := range []struct {
		name, id string
		want     []Record
	}{
		{"audit id", recs[2].ID, recs[2:3]},
		{"request id", recs[1].RequestID, request},
		{"approval id", recs[1].Details["approval_id"], request},
		{"refused decision's approval id", "no-such-approval", recs[3:4]},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Lookup(dir, tc.id)
			if err != nil {
				t.Fatal(err)
			}
			if events(got) != events(tc.want) {
				t.Fatalf("Lookup(%q) = %s, want %s", tc.id, events(got), events(tc.want))
			}
		})
	}
	if _, err := Lookup(dir, "A000000000099"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("an id of nothing: %v", err)
	}
}

// lookupHostile are ids no record carries, refused before the log is
// read.
var lookupHostile = []string{
	"", strings.Repeat("a", MaxLookupID+1), "A0000\n00001", "req\x00", "req\x1b[31m", "*", "A00000000000?",
	"[a-z]*", "../../etc/passwd", "a/b", "id with space", "\u202eid", "caf\u00e9", "id\r", "%s", "$(id)",
}

func TestLookupRefusesHostileIDs(t *testing.T) {
	dir, _ := approvalLog(t)
	for _, id := range lookupHostile {
		_, err := Lookup(dir, id)
		if !errors.Is(err, ErrBadID) {
			t.Errorf("Lookup(%q) = %v, want ErrBadID", id, err)
			continue
		}
		if strings.ContainsAny(err.Error(), "\x00\x1b\n\r\u202e") {
			t.Errorf("Lookup(%q): the refusal carries the id's control characters: %q", id, err)
		}
	}
	for _, id := range []string{"A000000000001", "R-hostile", "9f0c0c1e-2f4b-4b8e-9b57-2b9f0e7f4a11", strings.Repeat("a", MaxLookupID), "a.b_c"} {
		if err := CheckID(id); err != nil {
			t.Errorf("CheckID(%q): %v", id, err)
		}
	}
}

// FuzzCheckID: CheckID accepts only what a search may use, and its
// refusal never carries a control character.
func FuzzCheckID(f *testing.F) {
	for _, id := range append(lookupHostile, "A000000000001", "R-hostile") {
		f.Add(id)
	}
	f.Fuzz(func(t *testing.T, id string) {
		err := CheckID(id)
		if err != nil {
			if strings.ContainsFunc(err.Error(), func(r rune) bool { return r < 0x20 || r == 0x7f || r > 0x7e }) {
				t.Fatalf("CheckID(%q): refusal %q carries a control or non-ASCII character", id, err)
			}
			return
		}
		if id == "" || len(id) > MaxLookupID || strings.ContainsFunc(id, func(r rune) bool { return !idByte(byte(r)) || r > 0x7f }) {
			t.Fatalf("CheckID accepted %q", id)
		}
	})
}
