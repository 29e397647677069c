package etcdstore

import (
	"errors"
	"net/url"
	"testing"

	"coily.dev/coily/store"
)

var approvalKeySeeds = []string{"d/a/asked", "d/a/decided", "d/a%2Fb/asked", "d/a/b/asked", "d//asked", "d/a/", "d/a",
	"d/%zz/asked", "d/%41/asked", "d/a/Asked", "d/a/asked/", "e/a/asked", "d/a\x00/asked", "d/../asked", "d/a/other", ""}

// TestSplitApprovalKey: a key under the approvals' directory is one
// escaped id and one of its two records, or corrupt.
func TestSplitApprovalKey(t *testing.T) {
	good := map[string][2]string{"d/a/asked": {"a", "asked"}, "d/a/decided": {"a", "decided"}, "d/a%2Fb/asked": {"a/b", "asked"}, "d/../asked": {"..", "asked"}}
	for _, k := range approvalKeySeeds {
		id, part, err := splitApprovalKey("d/", k)
		want, ok := good[k]
		switch {
		case ok && (err != nil || id != want[0] || part != want[1]):
			t.Errorf("%q: %q %q %v, want %v", k, id, part, err, want)
		case !ok && !errors.Is(err, store.ErrCorrupt):
			t.Errorf("%q: %q %q %v, want corrupt", k, id, part, err)
		}
	}
}

// TestParseDecision: only a final state is a decision.
func TestParseDecision(t *testing.T) {
	for in, ok := range map[string]bool{
		`{"state":"APPROVAL_STATE_APPROVED","by":"bob"}`: true, `{"state":"APPROVAL_STATE_REJECTED"}`: true,
		`{"state":"APPROVAL_STATE_PENDING"}`: false, `{"state":"APPROVAL_STATE_UNSPECIFIED"}`: false, `{"state":"approved"}`: false,
		`{}`: false, `null`: false, ``: false, `{"state":2}`: false, `[]`: false,
	} {
		if _, err := parseDecision("k", []byte(in)); (err == nil) != ok || (err != nil && !errors.Is(err, store.ErrCorrupt)) {
			t.Errorf("%s: %v, want ok=%v", in, err, ok)
		}
	}
}

func FuzzSplitApprovalKey(f *testing.F) {
	for _, k := range approvalKeySeeds {
		f.Add(k)
	}
	f.Fuzz(func(t *testing.T, k string) {
		id, part, err := splitApprovalKey("d/", k)
		if err != nil {
			return
		}
		// What reads as an approval's record is the key that record is
		// written under, and nothing else.
		if e, _ := name("x", id); "d/"+e+"/"+part != k || url.PathEscape(id) != e {
			t.Fatalf("key %q reads as %q/%q", k, id, part)
		}
	})
}

func FuzzParseDecision(f *testing.F) {
	f.Add([]byte(`{"state":"APPROVAL_STATE_APPROVED","by":"bob"}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, data []byte) {
		d, err := parseDecision("k", data)
		if err == nil && (d.State == "" || d.State == "APPROVAL_STATE_PENDING") {
			t.Fatalf("%q reads as %+v", data, d)
		}
	})
}
