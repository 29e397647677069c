package policyfile

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"strings"

	"coily.dev/coily/policy"
	"coily.dev/coily/policycase"
)

// maxNamedFailures bounds the failing cases a refusal names.
const maxNamedFailures = 3

// RunTests runs the tests beside the policy file at path (package
// policycase) against p. It returns the tests file's SHA-256, "" when
// there is none; an error when it cannot be read, is not a valid tests
// file, or a case fails (naming the first few). A policy whose tests
// cannot be run is refused as one that fails them.
func RunTests(path string, p *policy.Policy) (string, error) {
	file := policycase.BesidePath(path)
	data, err := policycase.ReadFile(file)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("policy tests: %w", err)
	}
	sum := fmt.Sprintf("%x", sha256.Sum256(data))
	s, err := policycase.Parse(file, data)
	if err != nil {
		return sum, fmt.Errorf("policy tests: %w", err)
	}
	failures := policycase.Run(p, s)
	if len(failures) == 0 {
		return sum, nil
	}
	var named []string
	for _, f := range failures[:min(len(failures), maxNamedFailures)] {
		named = append(named, f.Error())
	}
	if len(failures) > maxNamedFailures {
		named = append(named, fmt.Sprintf("and %d more", len(failures)-maxNamedFailures))
	}
	return sum, fmt.Errorf("policy tests fail (%d of %d cases): %s", len(failures), len(s.Cases), strings.Join(named, "; "))
}
