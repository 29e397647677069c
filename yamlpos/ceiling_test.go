package yamlpos

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"coily.dev/coily/internal/hostileyaml"
)

// Locate answers every worst case, as large as a policy file may be,
// within a real memory ceiling and a deadline.
func TestLocateHostileUnderCeiling(t *testing.T) {
	cases := hostileyaml.Cases("version: 1\n", 4<<20, 8, 20000)
	hostileyaml.UnderCeiling(t, cases, 256<<20, 20*time.Second, func(data []byte) string {
		p, ok := Locate(data)
		return fmt.Sprintf("%v %d:%d", ok, p.Line, p.Column)
	})
}

// Input past the bounds is not handed to the second reader; input within
// them is, even when it is hostile in shape.
func TestLocateBounds(t *testing.T) {
	for _, c := range []struct {
		name string
		in   string
		ok   bool
	}{
		{"too large", "a: [\n" + strings.Repeat("#\n", maxBytes/2), false},
		{"too many brackets", "a: " + strings.Repeat("[", maxBrackets+1), false},
		{"brackets in a comment count", "a: [\n# " + strings.Repeat("[", maxBrackets+1), false},
		{"too many words", "a: [" + strings.Repeat("a,", maxWords), false},
		{"too many entries on a line", strings.Repeat("- ", maxEntries+1) + "[", false},
		{"entries on many lines", strings.Repeat("- a\n", 1000) + "- [", true},
		{"many brackets within the bound", "a: " + strings.Repeat("[", 1000), true},
	} {
		_, ok := Locate([]byte(c.in))
		if ok != c.ok {
			t.Errorf("%s: located %v, want %v", c.name, ok, c.ok)
		}
	}
}
