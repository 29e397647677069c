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
