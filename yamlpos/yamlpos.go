// Package yamlpos finds where a YAML syntax error is, for messages that
// name the line and column a person should look at, as yamllint or kubectl
// would. go.yaml.in/yaml/v3, which coily parses with, reports the start
// of the enclosing block instead (an unclosed [ on line 4 comes out as
// line 3); a second reader, github.com/goccy/go-yaml, run only on input
// the first one refused, gives the place, and for an unclosed flow
// collection the opening bracket is reported.
//
// It never panics on any input (it recovers), and it reads nothing but the
// bytes given. The second reader costs memory with the square of the
// nesting and hundreds of bytes a token, so Locate gives up (ok false) on
// input past bounds it checks itself, before that reader sees it, by counts
// that hold however a reader tokenizes: bytes, words, flow brackets, and
// block entries on a line.
package yamlpos

import (
	"errors"
	"fmt"
	"strings"

	goyaml "github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/parser"
)

// Pos is a syntax error's place (1-based line and column, in characters)
// and what is wrong there.
type Pos struct {
	Line, Column int
	Msg          string
}

// Locate returns where data's first YAML syntax error is. ok is false when
// it cannot tell (the second reader accepts data, or fails without a
// place).
func Locate(data []byte) (p Pos, ok bool) {
	if !bounded(data) {
		return Pos{}, false
	}
	defer func() {
		if recover() != nil {
			p, ok = Pos{}, false
		}
	}()
	_, err := parser.ParseBytes(data, 0)
	var se *goyaml.SyntaxError
	if err == nil || !errors.As(err, &se) || se.Token == nil || se.Token.Position == nil {
		return Pos{}, false
	}
	p = Pos{Line: se.Token.Position.Line, Column: se.Token.Position.Column, Msg: printable(se.Message)}
	// A plain scalar that ran on into a badly indented "key: value" line
	// is reported where it starts; the misplaced ':' is what to look at.
	if n := se.Token.Next; n != nil && n.Position != nil && n.Value == ":" && n.Position.Line > p.Line {
		p.Line, p.Column = n.Position.Line, n.Position.Column
	}
	if strings.Contains(se.Message, "must be specified") && (strings.Contains(se.Message, "']'") || strings.Contains(se.Message, "'}'")) {
		if line, col, bracket, found := unclosed(data, p.Line); found {
			return Pos{Line: line, Column: col, Msg: "unclosed " + string(bracket) + ": no matching " + closing(bracket)}, true
		}
	}
	return p, p.Line > 0
}

func closing(b rune) string {
	if b == '[' {
		return "]"
	}
	return "}"
}

// unclosed finds the innermost flow bracket ([ or {) still open at the
// start of line upTo, skipping quoted text and comments.
func unclosed(data []byte, upTo int) (line, col int, bracket rune, ok bool) {
	type open struct {
		line, col int
		b         rune
	}
	var stack []open
	line, col = 1, 0
	var quote rune // inside '…' or "…" (which may span lines)
	comment, escaped := false, false
	for _, r := range string(data) {
		col++
		if r == '\n' {
			line, col, comment = line+1, 0, false
			if line >= upTo {
				break
			}
			continue
		}
		switch {
		case comment:
		case escaped:
			escaped = false
		case quote == '"' && r == '\\':
			escaped = true
		case quote != 0:
			if r == quote {
				quote = 0
			}
		case r == '\'' || r == '"':
			quote = r
		case r == '#':
			comment = true
		case r == '[' || r == '{':
			stack = append(stack, open{line, col, r})
		case (r == ']' || r == '}') && len(stack) > 0:
			stack = stack[:len(stack)-1]
		}
	}
	if len(stack) == 0 {
		return 0, 0, 0, false
	}
	o := stack[len(stack)-1]
	return o.line, o.col, o.b, true
}

// Message words the error for a person: the second reader's text, said to
// be an indentation problem when the first reader's text (first) points
// that way.
func (p Pos) Message(first string) string {
	for _, hint := range []string{"did not find expected key", "expected '-' indicator", "block mapping", "mapping values are not allowed"} {
		if strings.Contains(first, hint) && !strings.HasPrefix(p.Msg, "unclosed") {
			return "bad indentation: " + p.Msg
		}
	}
	return p.Msg
}

// printable writes the control characters a reader's message may quote
// from the input (a tab, an escape) as escapes.
func printable(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch {
		case r == '\t':
			b.WriteString(`\t`)
		case r < 0x20 || r == 0x7f || r >= 0x80 && r < 0xa0:
			fmt.Fprintf(&b, "\\x%02x", r)
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}
