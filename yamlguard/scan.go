package yamlguard

import "fmt"

// scanner walks the input token by token as libyaml's scanner does, keeping
// only what the limits need: the flow level, the stack of block
// collections (by column), the simple-key candidate of each flow level,
// and whether a node is still awaited (an empty value counts one).
type scanner struct {
	data []byte
	lim  Limits
	i    int // byte offset
	line int // 0-based
	col  int // 0-based, in characters
	idx  int // characters read

	flow       int
	stack      []level
	keys       []simpleKey // by flow level
	keyAllowed bool
	pending    bool // an entry, key or value indicator awaits its node

	nodes, aliases, maxDepth int
	err                      *Error
}

// level is an open block collection: the column it is indented to.
// An indentless sequence is a block sequence at its mapping's column
// ("key:\n- a").
type level struct {
	col        int
	seq        bool
	indentless bool
}

// simpleKey is where a token that may turn out to be a mapping key began.
type simpleKey struct {
	ok        bool
	line, col int
	idx       int
}

func (s *scanner) at(i int) byte {
	if i < len(s.data) {
		return s.data[i]
	}
	return 0
}

// breakLen is the length of the line break at i (CR LF counts as one), or
// 0. NEL, LS and PS are breaks to the YAML 1.1 reader.
func (s *scanner) breakLen(i int) int {
	switch c := s.at(i); {
	case c == '\n':
		return 1
	case c == '\r':
		if s.at(i+1) == '\n' {
			return 2
		}
		return 1
	case c == 0xc2 && s.at(i+1) == 0x85:
		return 2
	case c == 0xe2 && s.at(i+1) == 0x80 && (s.at(i+2) == 0xa8 || s.at(i+2) == 0xa9):
		return 3
	}
	return 0
}

func (s *scanner) blank(i int) bool { c := s.at(i); return c == ' ' || c == '\t' }

// blankz: a blank, a break or the end.
func (s *scanner) blankz(i int) bool {
	return i >= len(s.data) || s.blank(i) || s.breakLen(i) > 0
}

// advance moves over one character.
func (s *scanner) advance() {
	c := s.data[s.i]
	switch {
	case c < 0x80:
		s.i++
	case c >= 0xf0:
		s.i += 4
	case c >= 0xe0:
		s.i += 3
	default:
		s.i += 2
	}
	s.i = min(s.i, len(s.data))
	s.col++
	s.idx++
}

// newline moves over the line break at s.i.
func (s *scanner) newline() {
	s.i += s.breakLen(s.i)
	s.line++
	s.col = 0
	s.idx++
}

func (s *scanner) fail(format string, args ...any) {
	s.failAt(s.line, s.col, format, args...)
}

func (s *scanner) failAt(line, col int, format string, args ...any) {
	if s.err == nil {
		s.err = &Error{Line: line + 1, Column: col + 1, Msg: fmt.Sprintf(format, args...)}
	}
}

func (s *scanner) run() {
	for s.err == nil {
		s.skipToToken()
		if s.i >= len(s.data) {
			s.endSlot()
			return
		}
		s.token()
	}
}

// skipToToken moves over blanks, comments and line breaks.
func (s *scanner) skipToToken() {
	for s.i < len(s.data) {
		switch c := s.data[s.i]; {
		case c == ' ' || c == '\t':
			s.advance()
		case c == 0xef && s.col == 0 && s.at(s.i+1) == 0xbb && s.at(s.i+2) == 0xbf:
			s.i += 3
		case c == '#':
			s.skipLine()
		case s.breakLen(s.i) > 0:
			s.newline()
			if s.flow == 0 {
				s.keyAllowed = true
			}
		default:
			return
		}
	}
}

// skipLine moves to the next line break.
func (s *scanner) skipLine() {
	for s.i < len(s.data) {
		if c := s.data[s.i]; c >= ' ' && c < 0x80 {
			s.i, s.col, s.idx = s.i+1, s.col+1, s.idx+1
			continue
		}
		if s.breakLen(s.i) > 0 {
			return
		}
		s.advance()
	}
}

func (s *scanner) top() *level {
	if len(s.stack) == 0 {
		return nil
	}
	return &s.stack[len(s.stack)-1]
}

// indent is the column of the innermost block collection, -1 outside one.
func (s *scanner) indent() int {
	if t := s.top(); t != nil {
		return t.col
	}
	return -1
}

// node counts a value, which fills an awaited one.
func (s *scanner) node() {
	s.pending = false
	s.nodes++
	if s.nodes > s.lim.MaxNodes {
		s.fail("more than %d values", s.lim.MaxNodes)
	}
}

// endSlot counts the empty value an indicator awaited and did not get.
func (s *scanner) endSlot() {
	if s.pending {
		s.node()
	}
}

// checkDepth checks the nesting after a collection opened at line:col.
func (s *scanner) checkDepth(line, col int) {
	d := len(s.stack) + s.flow
	s.maxDepth = max(s.maxDepth, d)
	if d > s.lim.MaxDepth {
		s.failAt(line, col, "nested more than %d deep", s.lim.MaxDepth)
	}
}

// push opens a block collection at column l.col of line.
func (s *scanner) push(l level, line int) {
	s.node()
	s.stack = append(s.stack, l)
	s.checkDepth(line, l.col)
}

// roll opens a block mapping at line:col if it lies right of the current
// collection.
func (s *scanner) roll(line, col int) {
	if s.flow == 0 && col > s.indent() {
		s.push(level{col: col}, line)
	}
}

// unroll closes the block collections right of col.
func (s *scanner) unroll(col int) {
	if s.flow > 0 {
		return
	}
	n := len(s.stack)
	for len(s.stack) > 0 && s.top().col > col {
		s.stack = s.stack[:len(s.stack)-1]
	}
	if len(s.stack) < n {
		s.endSlot()
	}
}

func (s *scanner) saveKey() {
	if s.keyAllowed {
		s.keys[s.flow] = simpleKey{ok: true, line: s.line, col: s.col, idx: s.idx}
	}
}

func (s *scanner) dropKey() { s.keys[s.flow] = simpleKey{} }

// docMarker reports a "---" or "..." line at s.i.
func (s *scanner) docMarker() bool {
	if s.col != 0 || !s.blankz(s.i+3) {
		return false
	}
	c := s.at(s.i)
	return (c == '-' || c == '.') && s.at(s.i+1) == c && s.at(s.i+2) == c
}
