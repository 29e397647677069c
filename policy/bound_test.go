package policy_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"coily.dev/coily/internal/hostileyaml"
	"coily.dev/coily/policy"
)

// hostilePolicies are the worst cases for the loader, as large as a policy
// may be, and what each is refused with.
func hostilePolicies() []hostileyaml.Case {
	cases := hostileyaml.Cases("version: 1\n", policy.MaxFileSize, 32, 200000)
	for i := range cases {
		if cases[i].Name == "alias bomb" {
			cases[i].Want = fmt.Sprintf("more than %d values with aliases expanded", 200000)
		}
	}
	return append(cases,
		hostileyaml.Case{Name: "values just within the limit", Want: `field x not found`,
			Data: []byte("version: 1\nx: [" + strings.Repeat("a,", 200000-10) + "a]\n")},
		hostileyaml.Case{Name: "alias bomb of wide fan-out in a rule", Want: "with aliases expanded",
			Data: []byte("version: 1\nx: &e [" + strings.Repeat("A=b, ", 1000) + "A=b]\ncommands:\n" +
				strings.Repeat("- {name: r, binary: /bin/true, env: *e}\n", 990))},
		hostileyaml.Case{Name: "alias inside its own anchor", Want: "alias inside its own anchor",
			Data: []byte("version: 1\nx: &a [1, *a]\n")},
	)
}

// Each worst case is refused within a real memory ceiling and a deadline,
// with the refusal it deserves.
func TestParseHostileUnderCeiling(t *testing.T) {
	cases := hostilePolicies()
	got := hostileyaml.UnderCeiling(t, cases, 256<<20, 30*time.Second, func(data []byte) string {
		_, err := policy.Parse("hostile.yaml", data)
		return hostileyaml.Answer(err, new(*policy.Error))
	})
	for _, c := range cases {
		if g, ok := got[c.Name]; ok && (!strings.HasPrefix(g, "hostile.yaml") || !strings.Contains(g, c.Want)) {
			t.Errorf("%s: %s; want a refusal saying %q", c.Name, g, c.Want)
		}
	}
}

// The bounds name the place, and a policy within them loads: anchors and
// aliases that expand to little are fine.
func TestParseBounds(t *testing.T) {
	for _, c := range []struct{ name, in, want string }{
		{"deep", "version: 1\nx: " + strings.Repeat("[", 40), "hostile.yaml:2:35: nested more than 32 deep"},
		{"long key", "version: 1\n" + strings.Repeat("k", 1025) + ": 1\n", "hostile.yaml:2:1: a mapping key longer than 1024 characters"},
		{"too many aliases", "version: 1\nx: &a 1\ny: [" + strings.Repeat("*a, ", 1000) + "*a]\n", "more than 1000 aliases"},
	} {
		_, err := policy.Parse("hostile.yaml", []byte(c.in))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v; want %q", c.name, err, c.want)
		}
	}
	ok := "version: 1\nlimits: &l {memory: 1GiB}\ncommands:\n- {name: a, binary: /bin/true, limits: *l}\n- {name: b, binary: /bin/true, limits: *l}\n"
	if _, err := policy.Parse("ok.yaml", []byte(ok)); err != nil {
		t.Errorf("anchors within bounds: %v", err)
	}
}
