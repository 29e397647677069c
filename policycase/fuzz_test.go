package policycase

import (
	"errors"
	"testing"

	"coily.dev/coily/internal/hostileyaml"
	"coily.dev/coily/policy"
)

// FuzzPolicyTests reads arbitrary tests files: never a panic, every
// refusal a *policy.Error, every accepted case complete, and running the
// accepted ones against a policy never panics either.
func FuzzPolicyTests(f *testing.F) {
	f.Add([]byte(goodFile))
	for _, c := range hostileFiles {
		if len(c.data) < 64<<10 {
			f.Add([]byte(c.data))
		}
	}
	for _, c := range hostileyaml.Cases("version: 1\n", 2<<10, maxDepth, maxValues) {
		f.Add(c.Data)
	}
	p, err := policy.Parse("p.yaml", []byte(testPolicy))
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := Parse("t", data)
		if err != nil {
			var pe *policy.Error
			if !errors.As(err, &pe) {
				t.Fatalf("error %T %v", err, err)
			}
			return
		}
		for _, c := range s.Cases {
			if c.Name == "" || c.Principal == "" || len(c.Argv) == 0 || c.Argv[0] == "" || (c.Expect != Allow && c.Expect != Confirm && c.Expect != Deny) {
				t.Fatalf("incomplete case accepted: %+v", c)
			}
		}
		_ = Run(p, s)
	})
}
