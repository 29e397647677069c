package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"coily.dev/coily/policy"
	"coily.dev/coily/policycase"
)

// Every policy the repository ships (examples/, and deploy/'s as the
// package installs it) has tests beside it, and they pass.
func TestShippedPoliciesPassTheirTests(t *testing.T) {
	files, err := filepath.Glob("../../examples/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, "../../deploy/policy.yaml")
	n := 0
	for _, file := range files {
		if strings.HasSuffix(file, ".tests.yaml") {
			continue
		}
		n++
		t.Run(filepath.Base(filepath.Dir(file))+"/"+filepath.Base(file), func(t *testing.T) {
			tests := policycase.BesidePath(file)
			if _, err := os.Stat(tests); err != nil {
				t.Fatalf("a shipped policy without tests: %v", err)
			}
			p, err := policy.Load(file)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range p.Rules() {
				requireComponent(t, r.Absent == nil, r.Binary+" (rule "+r.Name+" of "+file+")")
			}
			var out, errb bytes.Buffer
			if code := policyTest(&env{stdout: &out, stderr: &errb}, tests, "", false); code != 0 {
				t.Fatalf("policy test %s = %d:\n%s%s", tests, code, out.String(), errb.String())
			}
		})
	}
	if n < 5 {
		t.Fatalf("%d shipped policies found, want at least 5", n)
	}
}
