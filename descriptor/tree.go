package descriptor

import (
	"encoding/json"
	"slices"
	"strconv"
	"unicode/utf8"
)

// A value is one node of a parsed document: the JSON data model, with
// positions for error messages. Both the JSON and the YAML reader produce it,
// so everything after parsing (field rules, canonical form) is shared.
type value struct {
	kind    kind
	str     string // kindString; kindNumber: the JSON number text
	n       int64  // kindInt
	b       bool   // kindBool
	pos     pos
	members []member // kindObject, in document order
	items   []*value // kindArray
}

type kind uint8

const (
	kindObject kind = iota + 1
	kindArray
	kindString
	kindInt    // an integer within ±(2^53-1): descriptors allow no other numbers
	kindNumber // any JSON number (CanonicalizeJSON only)
	kindBool
	kindNull // CanonicalizeJSON only
)

type member struct {
	key    string
	keyPos pos
	val    *value
}

// pos locates a value: line and column (1-based, column in characters) when
// line > 0, else a byte offset into the source when off >= 0, else nothing.
type pos struct{ line, col, off int }

var noPos = pos{off: -1}

// get returns the member named key, or nil.
func (v *value) get(key string) *value {
	for _, m := range v.members {
		if m.key == key {
			return m.val
		}
	}
	return nil
}

// toAny converts v to the Go values Canonicalize takes, leaving out the
// top-level members named in omit.
func (v *value) toAny(omit ...string) any {
	switch v.kind {
	case kindObject:
		m := make(map[string]any, len(v.members))
		for _, mem := range v.members {
			if !slices.Contains(omit, mem.key) {
				m[mem.key] = mem.val.toAny()
			}
		}
		return m
	case kindArray:
		a := make([]any, len(v.items))
		for i, e := range v.items {
			a[i] = e.toAny()
		}
		return a
	case kindString:
		return v.str
	case kindInt:
		return v.n
	case kindNumber:
		return json.Number(v.str)
	case kindBool:
		return v.b
	default:
		return nil
	}
}

// fromAny converts a value built by this package (map[string]any with
// sorted iteration, []any, string, int64, bool) to a position-less value.
func fromAny(x any) *value {
	switch x := x.(type) {
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		v := &value{kind: kindObject, pos: noPos}
		for _, k := range keys {
			v.members = append(v.members, member{key: k, keyPos: noPos, val: fromAny(x[k])})
		}
		return v
	case []any:
		v := &value{kind: kindArray, pos: noPos}
		for _, e := range x {
			v.items = append(v.items, fromAny(e))
		}
		return v
	case string:
		return &value{kind: kindString, str: x, pos: noPos}
	case int64:
		return &value{kind: kindInt, n: x, pos: noPos}
	case bool:
		return &value{kind: kindBool, b: x, pos: noPos}
	default:
		return &value{kind: kindNull, pos: noPos}
	}
}

// source is the text a tree was parsed from, for turning positions into
// line:column. A nil source has no positions.
type source struct{ data []byte }

func (s *source) lineCol(p pos) (int, int) {
	if p.line > 0 {
		return p.line, p.col
	}
	if s == nil || p.off < 0 || p.off > len(s.data) {
		return 0, 0
	}
	return lineCol(s.data, p.off)
}

// lineCol converts a byte offset into a 1-based line and character column,
// counting LF, CR LF and CR as line breaks (as the YAML reader does).
func lineCol(data []byte, off int) (int, int) {
	line, start := 1, 0
	for i := 0; i < off; i++ {
		switch data[i] {
		case '\n':
			line, start = line+1, i+1
		case '\r':
			if i+1 < len(data) && data[i+1] == '\n' {
				continue // the LF ends the line
			}
			line, start = line+1, i+1
		}
	}
	return line, utf8.RuneCount(data[start:off]) + 1
}

// errAt returns a bad-request error about field at p.
func (s *source) errAt(field string, p pos, format string, args ...any) *Error {
	e := badf(format, args...)
	e.Field = field
	e.Line, e.Column = s.lineCol(p)
	return e
}

// Paths name values in error messages: top-level members by name, deeper
// ones as parent["key"] and parent[index].
func memberPath(parent, key string) string {
	if parent == "" {
		if isFieldName(key) {
			return key
		}
		return quote(key)
	}
	return parent + "[" + quote(key) + "]"
}

func indexPath(parent string, i int) string {
	return parent + "[" + strconv.Itoa(i) + "]"
}

func isFieldName(s string) bool {
	if s == "" || len(s) > maxEcho {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= 'a' && c <= 'z' || c == '_' || c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}
