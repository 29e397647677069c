package descriptor

import (
	"errors"
	"strings"
	"testing"
	"time"

	"coily.dev/coily/internal/ceiling"
	"coily.dev/coily/internal/hostileyaml"
)

// heapCeiling is the memory a child parsing one hostile file may use.
const heapCeiling = 256 << 20

// Each worst case, as large as a request may be, is refused within a
// real memory ceiling and a deadline, with the refusal it deserves.
func TestParseHostileUnderCeiling(t *testing.T) {
	cases := hostileyaml.Cases(yamlDoc(), MaxSize, MaxDepth, MaxNodes)
	if name, ok := ceiling.Child(t); ok {
		for _, c := range cases {
			if c.Name == name {
				_, _, err := ParseRequest(c.Data)
				var e *Error
				if !errors.As(err, &e) {
					ceiling.Report("not refused as an *Error: " + errString(err))
					return
				}
				ceiling.Report(e.Error())
			}
		}
		return
	}
	for _, c := range cases {
		got, err := ceiling.Run(t, c.Name, heapCeiling, 20*time.Second)
		if err != nil {
			t.Error(err)
			continue
		}
		if !strings.HasPrefix(got, CodeBadRequest+": ") || !strings.Contains(got, c.Want) {
			t.Errorf("%s: %s; want a %s refusal saying %q", c.Name, got, CodeBadRequest, c.Want)
		}
	}
}

func errString(err error) string {
	if err == nil {
		return "accepted"
	}
	return err.Error()
}
