package descriptor

import (
	"bytes"
	"unicode/utf8"

	"coily.dev/coily/descriptor/layout"
)

// Limits on a descriptor as a whole.
const (
	// MaxSize is the largest request or teardown file accepted, in bytes.
	MaxSize = 2 << 20
	// MaxResponseSize is the largest response file accepted, in bytes
	// (package layout defines it).
	MaxResponseSize = layout.MaxResponseSize
	// MaxDepth is the deepest nesting of mappings and sequences allowed
	// (the top-level mapping is depth 1).
	MaxDepth = 8
	// MaxNodes is the most values (mappings, sequences, member names and
	// scalars) a file may hold.
	MaxNodes = 20000
	// MaxKeyLen is the longest member name, in characters (the YAML reader
	// takes no longer key).
	MaxKeyLen = 1024
)

var bom = []byte{0xef, 0xbb, 0xbf}

// parseObject checks data's encoding and size, parses it as JSON or YAML
// and returns the top-level mapping.
//
// Input whose first non-blank character is '{' is read as JSON by a strict
// RFC 8259 reader, so that every JSON text means exactly what it means in
// JSON (the YAML library refuses some JSON, such as \/ and surrogate-pair
// escapes, and takes U+0085 for a line break). If it is not JSON at all it is
// read as YAML (a flow mapping, say). The YAML reader is only used for
// inputs of at most MaxSize bytes.
func parseObject(data []byte, maxSize int) (*value, *source, error) {
	if len(data) > maxSize {
		return nil, nil, badf("file is larger than %d bytes", maxSize)
	}
	if len(data) == 0 {
		return nil, nil, badf("file is empty")
	}
	if bytes.HasPrefix(data, bom) {
		return nil, nil, badf("byte-order mark not allowed")
	}
	if i := bytes.IndexByte(data, 0); i >= 0 {
		return nil, nil, atOffset(data, i, "NUL byte not allowed")
	}
	if !utf8.Valid(data) {
		i := 0
		for i < len(data) {
			r, size := utf8.DecodeRune(data[i:])
			if r == utf8.RuneError && size == 1 {
				break
			}
			i += size
		}
		return nil, nil, atOffset(data, i, "not valid UTF-8")
	}
	src := &source{data: data}
	if first := bytes.TrimLeft(data, " \t\r\n"); len(first) > 0 && first[0] == '{' {
		p := jsonParser{data: data, strict: true, maxDepth: MaxDepth, maxNodes: MaxNodes}
		v, jerr := p.parse()
		switch {
		case jerr == nil:
			return v, src, nil
		case !jerr.syntax || len(data) > MaxSize:
			return nil, nil, jerr.err
		}
		// Not JSON: fall through to YAML.
	}
	if len(data) > MaxSize {
		return nil, nil, badf("files larger than %d bytes must be JSON", MaxSize)
	}
	v, err := parseYAML(data, MaxDepth, MaxNodes)
	if err != nil {
		return nil, nil, err
	}
	if v.kind != kindObject {
		return nil, nil, src.errAt("", v.pos, "top level must be a mapping")
	}
	return v, src, nil
}

func atOffset(data []byte, off int, format string, args ...any) *Error {
	e := badf(format, args...)
	e.Line, e.Column = lineCol(data, off)
	return e
}
