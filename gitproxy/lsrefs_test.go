package gitproxy

import (
	"fmt"
	"strings"
	"testing"
)

var lsRefsCases = []struct {
	name, in string
	refs     map[string]string // nil: refused
}{
	{"heads and tags", pkt(oidA+" refs/heads/main\n") + pkt(oidB+" refs/tags/v1\n") + "0000",
		map[string]string{"refs/heads/main": oidA, "refs/tags/v1": oidB}},
	{"no refs", "0000", map[string]string{}},
	{"without newlines", pkt(oidA+" refs/heads/main") + "0000", map[string]string{"refs/heads/main": oidA}},
	{"an attribute", pkt(oidA+" refs/heads/main symref-target:refs/heads/x\n") + "0000", nil},
	{"HEAD", pkt(oidA+" HEAD\n") + "0000", nil},
	{"outside heads and tags", pkt(oidA+" refs/pull/1/head\n") + "0000", nil},
	{"a ref git refuses", pkt(oidA+" refs/heads/a..b\n") + "0000", nil},
	{"a ref with a newline inside", pkt(oidA+" refs/heads/a\nrefs/heads/b\n") + "0000", nil},
	{"a ref with a carriage return", pkt(oidA+" refs/heads/a\r\n") + "0000", nil},
	{"upper-case OID", pkt(strings.ToUpper(oidA)+" refs/heads/main\n") + "0000", nil},
	{"SHA-256 OID", pkt(strings.Repeat("a", 64)+" refs/heads/main\n") + "0000", nil},
	{"short OID", pkt(oidA[:39]+" refs/heads/main\n") + "0000", nil},
	{"named twice", pkt(oidA+" refs/heads/main\n") + pkt(oidB+" refs/heads/main\n") + "0000", nil},
	{"no flush", pkt(oidA + " refs/heads/main\n"), nil},
	{"data after the flush", pkt(oidA+" refs/heads/main\n") + "0000" + pkt(oidB+" refs/heads/x\n"), nil},
	{"an error packet", pkt("ERR upstream says no\n") + "0000", nil},
	{"a delimiter", "0001" + pkt(oidA+" refs/heads/main\n") + "0000", nil},
	{"length not hex", "00zz0000", nil},
	{"nothing", "", nil},
	{"too many", strings.Repeat(pkt(oidA+" refs/heads/x\n"), 1) + func() string {
		var b strings.Builder
		for i := range maxLsRefs {
			b.WriteString(pkt(fmt.Sprintf("%s refs/tags/t%d\n", oidB, i)))
		}
		return b.String()
	}() + "0000", nil},
}

// parseLsRefs takes only plain heads and tags with SHA-1 values, each
// once, ended by a flush; anything else makes the refresh run git fetch.
func TestParseLsRefs(t *testing.T) {
	for _, c := range lsRefsCases {
		t.Run(c.name, func(t *testing.T) {
			refs, err := parseLsRefs(strings.NewReader(c.in))
			if (err == nil) != (c.refs != nil) || fmt.Sprint(refs) != fmt.Sprint(c.refs) && c.refs != nil {
				t.Fatalf("got %v, %v; want %v", refs, err, c.refs)
			}
		})
	}
}

// FuzzParseLsRefs: parseLsRefs never panics, and every ref it takes is a
// plain head or tag with a SHA-1 value.
func FuzzParseLsRefs(f *testing.F) {
	for _, c := range lsRefsCases {
		if len(c.in) < 64<<10 {
			f.Add(c.in)
		}
	}
	f.Fuzz(func(t *testing.T, in string) {
		refs, err := parseLsRefs(strings.NewReader(in))
		if err != nil {
			return
		}
		for ref, oid := range refs {
			if !validRef(ref) || !oidPattern.MatchString(oid) || len(oid) != 40 ||
				!strings.HasPrefix(ref, "refs/heads/") && !strings.HasPrefix(ref, "refs/tags/") {
				t.Fatalf("took %q %q from %q", ref, oid, in)
			}
		}
	})
}
