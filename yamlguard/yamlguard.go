// Package yamlguard bounds YAML input before a YAML reader sees it.
//
// A YAML reader builds its whole node tree before its caller can count
// anything, and the cost of that tree (and of the second reader yamlpos
// runs on refused input) grows with nesting and with the number of values,
// not with the size alone: 30 KB of '[' cost one of them gigabytes. Check
// reads the raw bytes once, in linear time and with memory bounded by the
// depth limit, the way go.yaml.in/yaml/v3's scanner (libyaml's) reads them:
// quoted and block scalars, comments, plain scalars running over lines,
// flow and block collections, indentation. It refuses input deeper, larger
// or with more values, aliases or longer keys than the limits allow, naming
// the line and column where the limit was passed.
//
// Its counts never exceed what the reader would build from the same input
// (so input within the limits is never refused), and the reader never
// builds more than about twice what they say (the empty values and
// one-pair mappings the count leaves out), so the reader's cost on input
// that passes is bounded by the limits. Where input would make the reader
// fail, Check's reading may differ after that point; the reader stops
// there, and yamlpos bounds its own reader without this package.
package yamlguard

import (
	"errors"
	"fmt"
)

// Limits are the bounds Check applies. MaxBytes, MaxDepth, MaxNodes and
// MaxKeyLen must be positive: Check refuses everything otherwise.
type Limits struct {
	// MaxBytes bounds the input's size.
	MaxBytes int
	// MaxDepth bounds collections nested in one another, flow and block
	// alike; the outermost collection is depth 1.
	MaxDepth int
	// MaxNodes bounds the values: collections, scalars (keys among them)
	// and aliases.
	MaxNodes int
	// MaxAliases bounds the aliases (*name); 0 allows none.
	MaxAliases int
	// MaxKeyLen bounds a simple mapping key, in characters from its first
	// to the ':' after it. go.yaml.in/yaml/v3 takes nothing longer than
	// 1024 for a key.
	MaxKeyLen int
}

// Error is a refusal: what limit the input passes, and where.
type Error struct {
	// Line and Column (1-based, the column in characters) locate where the
	// limit was passed; zero for the input as a whole.
	Line, Column int
	// Msg says which limit, e.g. "nested more than 8 deep".
	Msg string
}

func (e *Error) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("line %d:%d: %s", e.Line, e.Column, e.Msg)
	}
	return e.Msg
}

var errLimits = errors.New("yamlguard: limits not set")

// Check returns nil if data is within l, an *Error naming the first limit
// it passes otherwise.
func Check(data []byte, l Limits) error {
	if l.MaxBytes <= 0 || l.MaxDepth <= 0 || l.MaxNodes <= 0 || l.MaxKeyLen <= 0 || l.MaxAliases < 0 {
		return errLimits
	}
	if len(data) > l.MaxBytes {
		return &Error{Msg: fmt.Sprintf("larger than %d bytes", l.MaxBytes)}
	}
	s := newScanner(data, l)
	s.run()
	if s.err != nil {
		return s.err
	}
	return nil
}

// counts scans data as Check does, without limits: the deepest nesting,
// the values and the aliases. Tests compare them with what a reader builds.
func counts(data []byte) (depth, nodes, aliases int) {
	huge := int(^uint(0) >> 2)
	s := newScanner(data, Limits{MaxBytes: huge, MaxDepth: huge, MaxNodes: huge, MaxAliases: huge, MaxKeyLen: huge})
	s.run()
	return s.maxDepth, s.nodes, s.aliases
}

func newScanner(data []byte, l Limits) *scanner {
	return &scanner{data: data, lim: l, keys: make([]simpleKey, 1, 8), keyAllowed: true}
}
