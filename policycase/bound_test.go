package policycase

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"coily.dev/coily/internal/ceiling"
	"coily.dev/coily/internal/hostileyaml"
	"coily.dev/coily/policy"
)

// hostileTests are the worst cases for the reader, as large as a tests
// file may be, and what each is refused with.
func hostileTests() []hostileyaml.Case {
	cases := hostileyaml.Cases("version: 1\n", MaxFileSize, maxDepth, maxValues)
	for i := range cases {
		switch cases[i].Name {
		case "alias bomb":
			cases[i].Want = "more than 100 aliases"
		case "long key":
			cases[i].Want = "longer than 64"
		}
	}
	return append(cases,
		hostileyaml.Case{Name: "alias bomb within the alias bound", Want: fmt.Sprintf("more than %d values with aliases expanded", maxValues),
			Data: []byte("version: 1\na: &a [" + strings.Repeat("x,", 2000) + "x]\nb: &b [" + strings.Repeat("*a,", 60) + "*a]\n")},
		hostileyaml.Case{Name: "alias inside its own anchor", Want: "alias inside its own anchor",
			Data: []byte("version: 1\nx: &a [1, *a]\n")},
	)
}

// Each worst case is refused within a real memory ceiling and a
// deadline, with the refusal it deserves.
func TestParseHostileUnderCeiling(t *testing.T) {
	cases := hostileTests()
	if name, ok := ceiling.Child(t); ok {
		for _, c := range cases {
			if c.Name == name {
				_, err := Parse("hostile.tests.yaml", c.Data)
				var e *policy.Error
				switch {
				case err == nil:
					ceiling.Report("accepted")
				case !errors.As(err, &e):
					ceiling.Report(fmt.Sprintf("not a *policy.Error: %T %v", err, err))
				default:
					ceiling.Report(e.Error())
				}
			}
		}
		return
	}
	for _, c := range cases {
		got, err := ceiling.Run(t, c.Name, 256<<20, 30*time.Second)
		if err != nil {
			t.Error(err)
			continue
		}
		if !strings.HasPrefix(got, "hostile.tests.yaml") || !strings.Contains(got, c.Want) {
			t.Errorf("%s: %s; want a refusal saying %q", c.Name, got, c.Want)
		}
	}
}
