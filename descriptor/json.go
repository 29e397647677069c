package descriptor

import (
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// jsonParser is a strict RFC 8259 reader producing a value tree. In
// descriptor mode (strict) it also applies the descriptor rules as it goes,
// so hostile input never costs more than the limits allow: depth and node
// count, integers only (within ±(2^53-1)), no null. Always: duplicate member
// names, invalid UTF-8 and unpaired surrogate escapes are refused.
type jsonParser struct {
	data     []byte
	i        int
	strict   bool
	maxDepth int
	maxNodes int // 0: no limit
	nodes    int
}

// jsonError is a refusal from the JSON reader. A syntax error means the
// input is not JSON at all (the caller may then try YAML); any other error
// is a refusal of JSON that breaks a rule.
type jsonError struct {
	err    *Error
	syntax bool
}

func (p *jsonParser) fail(syntax bool, path string, off int, format string, args ...any) *jsonError {
	e := badf(format, args...)
	e.Field = path
	e.Line, e.Column = lineCol(p.data, min(off, len(p.data)))
	return &jsonError{err: e, syntax: syntax}
}

// parseJSON parses one JSON text (surrounding whitespace allowed).
func (p *jsonParser) parse() (*value, *jsonError) {
	v, err := p.value(0, "")
	if err != nil {
		return nil, err
	}
	p.skipSpace()
	if p.i != len(p.data) {
		return nil, p.fail(true, "", p.i, "unexpected data after the JSON value")
	}
	return v, nil
}

func (p *jsonParser) skipSpace() {
	for p.i < len(p.data) {
		switch p.data[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

func (p *jsonParser) value(depth int, path string) (*value, *jsonError) {
	p.skipSpace()
	if p.i >= len(p.data) {
		return nil, p.fail(true, path, p.i, "unexpected end of input")
	}
	p.nodes++
	if p.maxNodes > 0 && p.nodes > p.maxNodes {
		return nil, p.fail(false, path, p.i, "more than %d values", p.maxNodes)
	}
	start := p.i
	switch c := p.data[p.i]; {
	case c == '{' || c == '[':
		if depth+1 > p.maxDepth {
			return nil, p.fail(false, path, start, "nested more than %d deep", p.maxDepth)
		}
		if c == '{' {
			return p.object(depth+1, path)
		}
		return p.array(depth+1, path)
	case c == '"':
		s, err := p.string(path)
		if err != nil {
			return nil, err
		}
		return &value{kind: kindString, str: s, pos: pos{off: start}}, nil
	case c == 't':
		return p.literal("true", &value{kind: kindBool, b: true, pos: pos{off: start}}, path)
	case c == 'f':
		return p.literal("false", &value{kind: kindBool, pos: pos{off: start}}, path)
	case c == 'n':
		v, err := p.literal("null", &value{kind: kindNull, pos: pos{off: start}}, path)
		if err == nil && p.strict {
			return nil, p.fail(false, path, start, "null is not allowed (leave the member out instead)")
		}
		return v, err
	case c == '-' || isDigit(c):
		return p.number(path)
	default:
		return nil, p.fail(true, path, start, "unexpected character %s", quote(string(rune(c))))
	}
}

func (p *jsonParser) literal(word string, v *value, path string) (*value, *jsonError) {
	if len(p.data)-p.i < len(word) || string(p.data[p.i:p.i+len(word)]) != word {
		return nil, p.fail(true, path, p.i, "invalid literal")
	}
	p.i += len(word)
	return v, nil
}

func (p *jsonParser) object(depth int, path string) (*value, *jsonError) {
	v := &value{kind: kindObject, pos: pos{off: p.i}}
	p.i++ // {
	p.skipSpace()
	if p.i < len(p.data) && p.data[p.i] == '}' {
		p.i++
		return v, nil
	}
	var seen map[string]struct{}
	for {
		p.skipSpace()
		if p.i >= len(p.data) || p.data[p.i] != '"' {
			return nil, p.fail(true, path, p.i, "expected a member name")
		}
		keyOff := p.i
		p.nodes++ // member names count as values, as they do in YAML
		if p.maxNodes > 0 && p.nodes > p.maxNodes {
			return nil, p.fail(false, path, keyOff, "more than %d values", p.maxNodes)
		}
		key, err := p.string(path)
		if err != nil {
			return nil, err
		}
		if p.strict && utf8.RuneCountInString(key) > MaxKeyLen {
			return nil, p.fail(false, path, keyOff, "a member name longer than %d characters", MaxKeyLen)
		}
		mpath := ""
		if p.strict {
			mpath = memberPath(path, key)
		}
		if seen == nil {
			seen = make(map[string]struct{})
		}
		if _, dup := seen[key]; dup {
			return nil, p.fail(false, mpath, keyOff, "duplicate member name")
		}
		seen[key] = struct{}{}
		p.skipSpace()
		if p.i >= len(p.data) || p.data[p.i] != ':' {
			return nil, p.fail(true, mpath, p.i, "expected ':'")
		}
		p.i++
		val, err := p.value(depth, mpath)
		if err != nil {
			return nil, err
		}
		v.members = append(v.members, member{key: key, keyPos: pos{off: keyOff}, val: val})
		p.skipSpace()
		if p.i >= len(p.data) {
			return nil, p.fail(true, path, p.i, "unterminated object")
		}
		switch p.data[p.i] {
		case ',':
			p.i++
		case '}':
			p.i++
			return v, nil
		default:
			return nil, p.fail(true, path, p.i, "expected ',' or '}'")
		}
	}
}

func (p *jsonParser) array(depth int, path string) (*value, *jsonError) {
	v := &value{kind: kindArray, pos: pos{off: p.i}}
	p.i++ // [
	p.skipSpace()
	if p.i < len(p.data) && p.data[p.i] == ']' {
		p.i++
		return v, nil
	}
	for {
		ipath := ""
		if p.strict {
			ipath = indexPath(path, len(v.items))
		}
		e, err := p.value(depth, ipath)
		if err != nil {
			return nil, err
		}
		v.items = append(v.items, e)
		p.skipSpace()
		if p.i >= len(p.data) {
			return nil, p.fail(true, path, p.i, "unterminated array")
		}
		switch p.data[p.i] {
		case ',':
			p.i++
		case ']':
			p.i++
			return v, nil
		default:
			return nil, p.fail(true, path, p.i, "expected ',' or ']'")
		}
	}
}

// string reads a string starting at the opening quote.
func (p *jsonParser) string(path string) (string, *jsonError) {
	start := p.i
	p.i++
	var buf []byte // nil until an escape is met
	lit := p.i     // start of the pending literal run
	for {
		if p.i >= len(p.data) {
			return "", p.fail(true, path, start, "unterminated string")
		}
		c := p.data[p.i]
		switch {
		case c == '"':
			s := p.data[lit:p.i]
			p.i++
			if buf == nil {
				return string(s), nil
			}
			return string(append(buf, s...)), nil
		case c == '\\':
			buf = append(buf, p.data[lit:p.i]...)
			if p.i+1 >= len(p.data) {
				return "", p.fail(true, path, p.i, "unterminated string")
			}
			esc := p.data[p.i+1]
			p.i += 2
			switch esc {
			case '"', '\\', '/':
				buf = append(buf, esc)
			case 'b':
				buf = append(buf, '\b')
			case 'f':
				buf = append(buf, '\f')
			case 'n':
				buf = append(buf, '\n')
			case 'r':
				buf = append(buf, '\r')
			case 't':
				buf = append(buf, '\t')
			case 'u':
				r, ok := p.hex4()
				if !ok {
					return "", p.fail(true, path, p.i-2, "invalid \\u escape")
				}
				if utf16.IsSurrogate(r) {
					r2 := rune(-1)
					if r < 0xdc00 && p.i+1 < len(p.data) && p.data[p.i] == '\\' && p.data[p.i+1] == 'u' {
						p.i += 2
						if r2, ok = p.hex4(); !ok {
							return "", p.fail(true, path, p.i-2, "invalid \\u escape")
						}
					}
					if r = utf16.DecodeRune(r, r2); r == utf8.RuneError {
						return "", p.fail(false, path, start, "string has an unpaired UTF-16 surrogate escape")
					}
				}
				buf = utf8.AppendRune(buf, r)
			default:
				return "", p.fail(true, path, p.i-2, "invalid escape")
			}
			lit = p.i
		case c < 0x20:
			return "", p.fail(true, path, p.i, "control character in string (escape it)")
		case c < utf8.RuneSelf:
			p.i++
		default:
			r, size := utf8.DecodeRune(p.data[p.i:])
			if r == utf8.RuneError && size == 1 {
				return "", p.fail(false, path, p.i, "string is not valid UTF-8")
			}
			p.i += size
		}
	}
}

func (p *jsonParser) hex4() (rune, bool) {
	if len(p.data)-p.i < 4 {
		return 0, false
	}
	var r rune
	for _, c := range p.data[p.i : p.i+4] {
		var d byte
		switch {
		case c >= '0' && c <= '9':
			d = c - '0'
		case c >= 'a' && c <= 'f':
			d = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			d = c - 'A' + 10
		default:
			return 0, false
		}
		r = r<<4 | rune(d)
	}
	p.i += 4
	return r, true
}

func (p *jsonParser) number(path string) (*value, *jsonError) {
	start := p.i
	i := p.i
	if p.data[i] == '-' {
		i++
	}
	for i < len(p.data) && isNumberByte(p.data[i]) {
		i++
	}
	lit := string(p.data[start:i])
	if !isJSONNumber(lit) {
		return nil, p.fail(true, path, start, "invalid number")
	}
	p.i = i
	if !p.strict {
		return &value{kind: kindNumber, str: lit, pos: pos{off: start}}, nil
	}
	n, ok := parseSafeInt(lit)
	if !ok {
		for _, c := range lit {
			if c == '.' || c == 'e' || c == 'E' {
				return nil, p.fail(false, path, start, "floating-point numbers are not allowed")
			}
		}
		return nil, p.fail(false, path, start, "integer out of range (more than 2^53-1 in magnitude)")
	}
	return &value{kind: kindInt, n: n, pos: pos{off: start}}, nil
}

func isNumberByte(c byte) bool {
	return isDigit(c) || c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-'
}

// maxSafeInt is 2^53-1, the largest integer every JSON reader holds exactly.
const maxSafeInt = 1<<53 - 1

// parseSafeInt parses a plain decimal integer, -?(0|[1-9][0-9]*), within
// ±(2^53-1).
func parseSafeInt(s string) (int64, bool) {
	d := s
	if len(d) > 0 && d[0] == '-' {
		d = d[1:]
	}
	if d == "" || len(d) > 16 || (d[0] == '0' && len(d) > 1) {
		return 0, false
	}
	for i := 0; i < len(d); i++ {
		if !isDigit(d[i]) {
			return 0, false
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n > maxSafeInt || n < -maxSafeInt {
		return 0, false
	}
	return n, true
}

// CanonicalizeJSON parses data as one JSON text and returns its RFC 8785
// canonical form. It is strict: duplicate member names, invalid UTF-8,
// unpaired surrogate escapes, a byte-order mark and anything after the value
// are refused; numbers are taken as IEEE 754 doubles.
func CanonicalizeJSON(data []byte) ([]byte, error) {
	p := jsonParser{data: data, maxDepth: maxCanonicalDepth}
	v, err := p.parse()
	if err != nil {
		return nil, err.err
	}
	return Canonicalize(v.toAny())
}
