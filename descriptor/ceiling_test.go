package descriptor

import (
	"strings"
	"testing"
	"time"

	"coily.dev/coily/internal/hostileyaml"
)

// heapCeiling is the memory a child parsing one hostile file may use.
const heapCeiling = 256 << 20

// Each worst case, as large as a request may be, is refused within a
// real memory ceiling and a deadline, with the refusal it deserves.
func TestParseHostileUnderCeiling(t *testing.T) {
	cases := hostileyaml.Cases(yamlDoc(), MaxSize, MaxDepth, MaxNodes)
	got := hostileyaml.UnderCeiling(t, cases, heapCeiling, 20*time.Second, func(data []byte) string {
		_, _, err := ParseRequest(data)
		return hostileyaml.Answer(err, new(*Error))
	})
	for _, c := range cases {
		if g, ok := got[c.Name]; ok && (!strings.HasPrefix(g, CodeBadRequest+": ") || !strings.Contains(g, c.Want)) {
			t.Errorf("%s: %s; want a %s refusal saying %q", c.Name, g, CodeBadRequest, c.Want)
		}
	}
}
