package audit

import (
	"strings"
	"testing"
)

// Every detail is capped: a long value under a long key is cut as well as
// renamed, and no value is longer than the cap plus its note.
func TestCapRecordDetails(t *testing.T) {
	long := strings.Repeat("v", 10*maxTextBytes)
	r := Record{Details: map[string]string{}}
	for i := range 20 {
		r.Details[strings.Repeat(string(rune('a'+i)), 200)] = long
	}
	r.Details["short"] = long
	capRecord(&r)
	if len(r.Details) != 21 {
		t.Fatalf("%d details, want 21", len(r.Details))
	}
	for k, v := range r.Details {
		if len(k) > 64 {
			t.Errorf("key of %d bytes kept", len(k))
		}
		if len(v) > maxTextBytes+200 {
			t.Errorf("%.10s…: value of %d bytes kept", k, len(v))
		}
	}
}

// Long keys that cut to the same 64 bytes, or to a key already there,
// never overwrite one another.
func TestCapRecordKeyCollisions(t *testing.T) {
	prefix := strings.Repeat("k", 64)
	r := Record{Details: map[string]string{prefix: "kept", prefix + "-one": "one", prefix + "-two": "two"}}
	capRecord(&r)
	if len(r.Details) != 3 || r.Details[prefix] != "kept" {
		t.Fatalf("details %v", r.Details)
	}
	seen := map[string]bool{}
	for k, v := range r.Details {
		if len(k) > 64 {
			t.Errorf("key of %d bytes", len(k))
		}
		seen[v] = true
	}
	if !seen["one"] || !seen["two"] {
		t.Fatalf("a value was overwritten: %v", r.Details)
	}
}

// Lists are capped in keys, items and bytes, each cut counted, and the
// caller's slices are never changed.
func TestCapRecordLists(t *testing.T) {
	items := make([]string, 3*maxListItems)
	for i := range items {
		items[i] = strings.Repeat("i", 2*maxItemBytes)
	}
	r := Record{Lists: map[string][]string{"big": items, "a-small": {"a,b", "c"}}}
	for i := range maxLists {
		r.Lists["k"+strings.Repeat("x", i)] = []string{"x"}
	}
	capRecord(&r)
	if len(r.Lists) != maxLists || r.Details["lists_cut"] == "" {
		t.Fatalf("%d lists kept (cut %q), want %d", len(r.Lists), r.Details["lists_cut"], maxLists)
	}
	if got := r.Lists["big"]; len(got) != maxListItems || len(got[0]) != maxItemBytes || r.Details["big_cut"] == "" {
		t.Errorf("big: %d items of %d bytes, cut %q", len(got), len(got[0]), r.Details["big_cut"])
	}
	if got := r.Lists["a-small"]; len(got) != 2 || got[0] != "a,b" {
		t.Errorf("a-small: %q", got)
	}
	if len(items[0]) != 2*maxItemBytes {
		t.Errorf("the caller's item was changed")
	}
}
