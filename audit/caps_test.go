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
