// Package policycase reads a policy's tests and runs them: a table of
// requests (a principal, its roles, an argv and the environment names it
// passes), each with the decision the policy must give it (allow by a
// rule, confirm by a rule, or deny). `coily policy test` and `coily
// policy check --tests` run them, and the server refuses to reload a
// policy whose tests fail (package policyfile).
//
// The tests live beside the policy, in a file of their own
// (policy.yaml's are policy.tests.yaml): the policy file stays what the
// server enforces, its SHA-256 unchanged by an edit to a test.
package policycase

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"

	"coily.dev/coily/policy"
	"coily.dev/coily/regularfile"
	"coily.dev/coily/yamlguard"
	"coily.dev/coily/yamlpos"
)

// Bounds on a tests file, checked on its bytes before the YAML reader
// sees them, and with aliases expanded before the cases are read.
const (
	// MaxFileSize bounds a tests file; larger files are refused.
	MaxFileSize = 1 << 20
	// MaxCases bounds the cases of one file.
	MaxCases = 10000
	// MaxArgs bounds one case's argv, env and roles, each.
	MaxArgs = 256
	// MaxString bounds one string of a case, in bytes.
	MaxString = 4096
	maxDepth  = 8
	maxValues = 100000
	maxAlias  = 100
)

var limits = yamlguard.Limits{MaxBytes: MaxFileSize, MaxDepth: maxDepth, MaxNodes: maxValues, MaxAliases: maxAlias, MaxKeyLen: 64}

// Expect is the decision a case must get.
type Expect string

// The decisions. Confirm is an allow that waits for an approver.
const (
	Allow   Expect = "allow"
	Confirm Expect = "confirm"
	Deny    Expect = "deny"
)

// Suite is one tests file.
type Suite struct {
	// Path is the file's name, in messages.
	Path  string
	Cases []Case
}

// Case is one request and the decision it must get.
type Case struct {
	Name      string
	Principal string
	// Roles are roles the principal holds besides those the policy
	// grants it (as a tailnet app capability gives them).
	Roles []string
	Argv  []string
	// Env names the variables the request passes.
	Env    []string
	Expect Expect
	// Rule is the rule that must decide: the allow rule for allow, the
	// rule whose approval is needed for confirm (the allowing rule's own,
	// or a confirm rule binding the request whichever rule allows it),
	// the deny rule for deny ("" for a deny by no rule allowing it, or
	// for any deny when the case names none).
	Rule string
	// Code is the refusal code a deny must carry: policy-deny (the
	// policy's rules) or permission-denied (no exec permission at all);
	// "" for either.
	Code string
	// Line and Column are where the case starts in the file.
	Line, Column int
}

// BesidePath is where the tests of the policy file at path live: its
// name without ".yaml" or ".yml", and ".tests.yaml".
func BesidePath(path string) string {
	base := strings.TrimSuffix(strings.TrimSuffix(path, ".yaml"), ".yml")
	return base + ".tests.yaml"
}

// PolicyBeside is the policy file a tests file is beside: the name
// without ".tests.yaml", with ".yaml", or ".yml" when only that exists.
func PolicyBeside(tests string) (string, error) {
	base, ok := strings.CutSuffix(tests, ".tests.yaml")
	if !ok {
		return "", fmt.Errorf("%s: a tests file is named POLICY.tests.yaml; name the policy with --policy", tests)
	}
	if _, err := os.Lstat(base + ".yaml"); err != nil {
		if _, yerr := os.Lstat(base + ".yml"); yerr == nil {
			return base + ".yml", nil
		}
	}
	return base + ".yaml", nil
}

// Load reads and parses the tests file at path.
func Load(path string) (*Suite, error) {
	data, err := ReadFile(path)
	if err != nil {
		return nil, err
	}
	return Parse(path, data)
}

// ReadFile reads the tests file at path, refusing one larger than
// MaxFileSize, and anything but a regular file (a FIFO would hang the
// reader). A missing file's error wraps fs.ErrNotExist.
func ReadFile(path string) ([]byte, error) {
	data, err := regularfile.Read(path, MaxFileSize)
	var pe *fs.PathError
	switch {
	case errors.Is(err, regularfile.ErrTooLarge):
		return nil, &policy.Error{File: path, Msg: fmt.Sprintf("file larger than %d bytes", MaxFileSize)}
	case errors.Is(err, regularfile.ErrNotRegular) && errors.As(err, &pe):
		return nil, &policy.Error{File: path, Msg: pe.Err.Error()}
	}
	return data, err
}

// Parse reads data as the tests file name (used in messages). Unknown
// keys, duplicate keys, explicit tags, merge keys and values of the wrong
// shape are refused, each with its file:line:column.
func Parse(name string, data []byte) (*Suite, error) {
	if len(data) > MaxFileSize {
		return nil, &policy.Error{File: name, Msg: fmt.Sprintf("file larger than %d bytes", MaxFileSize)}
	}
	if !utf8.Valid(data) {
		return nil, &policy.Error{File: name, Msg: "file is not valid UTF-8"}
	}
	if err := yamlguard.Check(data, limits); err != nil {
		return nil, guardError(name, err)
	}
	var root yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&root); err != nil && err != io.EOF {
		e := &policy.Error{File: name, Msg: strings.TrimPrefix(err.Error(), "yaml: ")}
		if p, ok := yamlpos.Locate(data); ok {
			e.Line, e.Column, e.Msg = p.Line, p.Column, p.Message(err.Error())
		}
		return nil, e
	}
	if len(root.Content) == 0 {
		return nil, &policy.Error{File: name, Msg: "empty tests file"}
	}
	if err := yamlguard.CheckExpanded(&root, maxValues); err != nil {
		return nil, guardError(name, err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err != io.EOF {
		return nil, &policy.Error{File: name, Line: extra.Line, Column: extra.Column, Msg: "a tests file must be a single YAML document"}
	}
	r := reader{name: name}
	s := r.suite(root.Content[0])
	if r.err != nil {
		return nil, r.err
	}
	return s, nil
}

func guardError(name string, err error) error {
	e := &policy.Error{File: name, Msg: err.Error()}
	if g, ok := err.(*yamlguard.Error); ok {
		e.Line, e.Column, e.Msg = g.Line, g.Column, g.Msg
	}
	return e
}
