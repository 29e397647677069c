package yamlguard

// token reads the token at s.i, as libyaml's fetch_next_token picks it.
func (s *scanner) token() {
	c := s.data[s.i]
	if s.flow == 0 {
		s.blockColumn(c == '-' && s.blankz(s.i+1))
	}
	switch {
	case s.col == 0 && c == '%':
		s.document()
		s.skipLine()
	case s.docMarker():
		s.document()
		s.i += 3
		s.col += 3
		s.idx += 3
	case c == '[' || c == '{':
		s.saveKey()
		s.node()
		s.flow++
		s.keys = append(s.keys, simpleKey{})
		s.checkDepth(s.line, s.col)
		s.keyAllowed = true
		s.advance()
	case c == ']' || c == '}':
		s.endSlot()
		if s.flow > 0 {
			s.flow--
			s.keys = s.keys[:len(s.keys)-1]
		}
		s.keyAllowed = false
		s.advance()
	case c == ',':
		s.endSlot()
		s.dropKey()
		s.keyAllowed = true
		s.advance()
	case c == '-' && s.blankz(s.i+1):
		s.blockEntry()
	case c == '?' && (s.flow > 0 || s.blankz(s.i+1)):
		s.endSlot()
		s.roll(s.line, s.col)
		s.dropKey()
		s.pending, s.keyAllowed = true, s.flow == 0
		s.advance()
	case c == ':' && (s.flow > 0 || s.blankz(s.i+1)):
		s.value()
	case c == '*':
		s.saveKey()
		s.node()
		if s.aliases++; s.aliases > s.lim.MaxAliases {
			s.fail("more than %d aliases", s.lim.MaxAliases)
		}
		s.advance()
		s.anchorName()
		s.keyAllowed = false
	case c == '&':
		s.saveKey()
		s.advance()
		s.anchorName()
		s.keyAllowed = false
	case c == '!':
		s.saveKey()
		s.tagName()
		s.keyAllowed = false
	case (c == '|' || c == '>') && s.flow == 0:
		s.dropKey()
		s.node()
		s.blockScalar()
		s.keyAllowed = true
	case c == '\'' || c == '"':
		s.saveKey()
		s.node()
		s.quoted(c)
		s.keyAllowed = false
	default:
		s.saveKey()
		s.node()
		s.plain()
	}
}

// blockColumn closes what a token at this column ends in the block
// context: collections indented further, and an indentless sequence at it
// unless the token is another entry. (A key on a later line at the
// column of an earlier one that had no value, "a:\nb: 1", leaves that empty
// value uncounted: the token might as well be the value.)
func (s *scanner) blockColumn(entry bool) {
	s.unroll(s.col)
	if t := s.top(); t != nil && t.indentless && s.col == t.col && !entry {
		s.stack = s.stack[:len(s.stack)-1]
		s.endSlot()
	}
}

// document handles a directive or a document marker: every block
// collection ends.
func (s *scanner) document() {
	s.unroll(-1)
	s.endSlot()
	s.dropKey()
	s.keyAllowed = false
}

// blockEntry reads "- ".
func (s *scanner) blockEntry() {
	if s.flow == 0 {
		switch t := s.top(); {
		case t == nil || s.col > t.col:
			s.push(level{col: s.col, seq: true}, s.line)
		case s.col == t.col && !t.seq:
			s.push(level{col: s.col, seq: true, indentless: true}, s.line)
		default:
			s.endSlot()
		}
	}
	s.dropKey()
	s.pending, s.keyAllowed = true, true
	s.advance()
}

// value reads ':'. After a simple key on the same line, a block mapping
// opens at the key's column; the key's length is checked.
func (s *scanner) value() {
	k := s.keys[s.flow]
	if k.ok && k.line == s.line {
		if s.idx-k.idx > s.lim.MaxKeyLen {
			s.line, s.col = k.line, k.col
			s.fail("a mapping key longer than %d characters", s.lim.MaxKeyLen)
			return
		}
		s.roll(k.line, k.col)
	} else {
		s.endSlot()
		s.roll(s.line, s.col)
	}
	s.dropKey()
	s.pending, s.keyAllowed = true, s.flow == 0
	s.advance()
}

// anchorName moves over an anchor or alias name: letters, digits, '_' and
// '-', as the reader takes them.
func (s *scanner) anchorName() {
	for s.i < len(s.data) {
		c := s.data[s.i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_' || c == '-') {
			return
		}
		s.advance()
	}
}

// tagName moves over a tag. The reader takes brackets, commas and quotes
// into one and fails unless a blank follows it, so it ends at a blank.
func (s *scanner) tagName() {
	for !s.blankz(s.i) {
		s.advance()
	}
}

// quoted reads a single- or double-quoted scalar. A document marker inside
// ends it, as it ends the reader.
func (s *scanner) quoted(q byte) {
	s.advance()
	for s.i < len(s.data) {
		c := s.data[s.i]
		if s.col > 0 && (plainByte[c] && c != '\\' && c != q || flowByte[c]) {
			s.i, s.col, s.idx = s.i+1, s.col+1, s.idx+1
			continue
		}
		if s.col == 0 && s.docMarker() {
			return
		}
		switch {
		case q == '\'' && c == '\'':
			s.advance()
			if s.at(s.i) != '\'' {
				return
			}
			s.advance()
		case q == '"' && c == '"':
			s.advance()
			return
		case q == '"' && c == '\\':
			s.advance()
			if s.breakLen(s.i) > 0 {
				s.newline()
			} else if s.i < len(s.data) {
				s.advance()
			}
		case s.breakLen(s.i) > 0:
			s.newline()
		default:
			s.advance()
		}
	}
}

// plain reads a plain scalar, over lines while they are indented past the
// current block collection (any line, in a flow collection).
func (s *scanner) plain() {
	indent := s.indent() + 1
	leading := false
	for s.i < len(s.data) {
		if s.docMarker() || s.data[s.i] == '#' {
			break
		}
		for s.i < len(s.data) {
			c := s.data[s.i]
			if plainByte[c] || s.flow == 0 && c < 0x80 && flowByte[c] {
				s.i, s.col, s.idx = s.i+1, s.col+1, s.idx+1
				continue
			}
			if s.blankz(s.i) || c == ':' && s.blankz(s.i+1) {
				break
			}
			if s.flow > 0 && flowByte[c] {
				break
			}
			s.advance()
		}
		if !s.blank(s.i) && s.breakLen(s.i) == 0 {
			break
		}
		for s.blank(s.i) || s.breakLen(s.i) > 0 {
			if s.blank(s.i) {
				s.advance()
			} else {
				s.newline()
				leading = true
			}
		}
		if s.flow == 0 && s.col < indent {
			break
		}
	}
	s.keyAllowed = leading
}

// blockScalar reads a literal or folded scalar: its header, then every
// line indented at least as far as its content (found as libyaml finds it).
func (s *scanner) blockScalar() {
	s.advance()
	increment := 0
	for range 2 {
		switch c := s.at(s.i); {
		case c == '+' || c == '-':
			s.advance()
		case c >= '1' && c <= '9':
			increment = int(c - '0')
			s.advance()
		}
	}
	for s.blank(s.i) {
		s.advance()
	}
	if s.at(s.i) == '#' {
		s.skipLine()
	}
	if s.breakLen(s.i) == 0 {
		return // not a block scalar after all: the reader fails here
	}
	s.newline()
	indent := 0
	if increment > 0 {
		indent = max(s.indent(), 0) + increment
	}
	if !s.blockBreaks(&indent) {
		return
	}
	for s.col == indent && s.i < len(s.data) {
		for s.i < len(s.data) && s.breakLen(s.i) == 0 {
			s.advance()
		}
		if s.i < len(s.data) {
			s.newline()
		}
		if !s.blockBreaks(&indent) {
			return
		}
	}
}

// blockBreaks moves over the indentation and empty lines before a block
// scalar's next content line, and settles the indentation if not yet
// known. It is false where the reader fails (a tab as indentation).
func (s *scanner) blockBreaks(indent *int) bool {
	maxIndent := 0
	for {
		for (*indent == 0 || s.col < *indent) && s.at(s.i) == ' ' {
			s.advance()
		}
		maxIndent = max(maxIndent, s.col)
		if (*indent == 0 || s.col < *indent) && s.at(s.i) == '\t' {
			return false
		}
		if s.breakLen(s.i) == 0 {
			break
		}
		s.newline()
	}
	if *indent == 0 {
		*indent = max(maxIndent, s.indent()+1, 1)
	}
	return true
}

// plainByte: ASCII that goes on a plain scalar anywhere (not a blank, a
// break, ':' or a flow indicator); flowByte: the flow indicators.
var plainByte, flowByte [256]bool

func init() {
	for c := '!'; c < 0x7f; c++ {
		plainByte[c] = true
	}
	plainByte[':'] = false
	for _, c := range ",?[]{}" {
		plainByte[c], flowByte[c] = false, true
	}
}
