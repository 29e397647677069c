package gitproxy

import (
	"bytes"
	"io"
	"strings"
	"testing"
)

var (
	oidA = strings.Repeat("a", 40)
	oidB = strings.Repeat("b", 40)
	oid0 = strings.Repeat("0", 40)
)

var updateCases = []struct {
	name  string
	lines []string
	ok    bool
}{
	{"one update", []string{oidA + " " + oidB + " refs/heads/agent/x"}, true},
	{"create and delete", []string{oid0 + " " + oidB + " refs/heads/agent/x", oidA + " " + oid0 + " refs/heads/agent/y"}, true},
	{"sha256", []string{strings.Repeat("a", 64) + " " + strings.Repeat("b", 64) + " refs/heads/x"}, true},
	{"none", nil, false},
	{"zero to zero", []string{oid0 + " " + oid0 + " refs/heads/agent/x"}, false},
	{"twice", []string{oidA + " " + oidB + " refs/heads/x", oid0 + " " + oidB + " refs/heads/x"}, false},
	{"mixed lengths", []string{oidA + " " + strings.Repeat("b", 64) + " refs/heads/x"}, false},
	{"upper-case oid", []string{strings.ToUpper(oidA) + " " + oidB + " refs/heads/x"}, false},
	{"extra field", []string{oidA + " " + oidB + " refs/heads/x y"}, false},
	{"two spaces", []string{oidA + "  " + oidB + " refs/heads/x"}, false},
	{"HEAD", []string{oidA + " " + oidB + " HEAD"}, false},
	{"outside refs", []string{oidA + " " + oidB + " heads/x"}, false},
	{"dotdot", []string{oidA + " " + oidB + " refs/heads/agent/../main"}, false},
	{"dot segment", []string{oidA + " " + oidB + " refs/heads/agent/.x"}, false},
	{"lock", []string{oidA + " " + oidB + " refs/heads/x.lock"}, false},
	{"trailing slash", []string{oidA + " " + oidB + " refs/heads/x/"}, false},
	{"trailing dot", []string{oidA + " " + oidB + " refs/heads/x."}, false},
	{"double slash", []string{oidA + " " + oidB + " refs/heads//x"}, false},
	{"reflog syntax", []string{oidA + " " + oidB + " refs/heads/x@{1}"}, false},
	{"carriage return", []string{oidA + " " + oidB + " refs/heads/x\r"}, false},
	{"tab", []string{oidA + " " + oidB + " refs/heads/x\ty"}, false},
	{"control byte", []string{oidA + " " + oidB + " refs/heads/x\x01"}, false},
	{"glob", []string{oidA + " " + oidB + " refs/heads/*"}, false},
	{"non-ascii", []string{oidA + " " + oidB + " refs/heads/é"}, false},
}

func TestParseUpdates(t *testing.T) {
	for _, c := range updateCases {
		t.Run(c.name, func(t *testing.T) {
			ups, err := parseUpdates(c.lines)
			if (err == nil) != c.ok {
				t.Fatalf("err = %v, want ok %v", err, c.ok)
			}
			if err == nil && len(ups) != len(c.lines) {
				t.Fatalf("%d updates of %d lines", len(ups), len(c.lines))
			}
		})
	}
}

// FuzzParseUpdates: an update read names a strict ref, two object ids of
// one length, not both zero, and no ref twice.
func FuzzParseUpdates(f *testing.F) {
	for _, c := range updateCases {
		f.Add(strings.Join(c.lines, "\n"))
	}
	f.Fuzz(func(t *testing.T, s string) {
		ups, err := parseUpdates(strings.Split(s, "\n"))
		if err != nil {
			return
		}
		seen := map[string]bool{}
		for _, u := range ups {
			if !validRef(u.ref) || seen[u.ref] || len(u.old) != len(u.new) || zero(u.old) && zero(u.new) ||
				!oidPattern.MatchString(u.old) || !oidPattern.MatchString(u.new) {
				t.Fatalf("update %+v read", u)
			}
			for _, b := range []byte(u.ref) {
				if b <= ' ' || b >= 0x7f {
					t.Fatalf("ref %q holds byte %#x", u.ref, b)
				}
			}
			seen[u.ref] = true
		}
	})
}

// What the proxy reads of one git's output is bounded however git writes
// it: exec copies through a writer's ReadFrom when it has one.
func TestCappedOutput(t *testing.T) {
	var c capped
	if _, err := io.Copy(&c, bytes.NewReader(make([]byte, 3*maxGitOutput))); err != nil {
		t.Fatal(err)
	}
	if len(c.Bytes()) != maxGitOutput {
		t.Fatalf("kept %d bytes, want %d", len(c.Bytes()), maxGitOutput)
	}
}
