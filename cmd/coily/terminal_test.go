package main

import (
	"strconv"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

// checkTerminalSafe fails unless s holds nothing a terminal would act on:
// valid UTF-8, no control, bidi or other non-graphic rune (cli's rules).
func checkTerminalSafe(t *testing.T, s string) {
	t.Helper()
	if !utf8.ValidString(s) {
		t.Fatalf("output %q is not valid UTF-8", s)
	}
	for _, r := range s {
		bidi := (r >= 0x202a && r <= 0x202e) || (r >= 0x2066 && r <= 0x2069)
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r <= 0x9f) || bidi || !unicode.IsGraphic(r) {
			t.Fatalf("output %q carries %U", s, r)
		}
	}
}

// shellSplit reads Argv's output back as a POSIX shell with $'...'
// would: words separated by single spaces; bare characters, '...' and
// $'...' parts, and \' between parts.
func shellSplit(t *testing.T, s string) []string {
	t.Helper()
	var words []string
	var w []byte
	inWord := false
	for i := 0; i < len(s); {
		switch {
		case s[i] == ' ':
			if !inWord {
				t.Fatalf("%s: empty word at %d", s, i)
			}
			words, w, inWord = append(words, string(w)), nil, false
			i++
			continue
		case s[i] == '\'':
			end := strings.IndexByte(s[i+1:], '\'')
			if end < 0 {
				t.Fatalf("%s: unterminated quote", s)
			}
			w, i = append(w, s[i+1:i+1+end]...), i+end+2
		case strings.HasPrefix(s[i:], "$'"):
			var n int
			w, n = ansiCUnquote(t, s, i+2, w)
			i = n
		case s[i] == '\\' && i+1 < len(s):
			w, i = append(w, s[i+1]), i+2
		default:
			w, i = append(w, s[i]), i+1
		}
		inWord = true
	}
	if inWord {
		words = append(words, string(w))
	}
	return words
}

// ansiCUnquote reads a $'...' body starting at i, appending what it means
// to w, and returns the index after the closing quote.
func ansiCUnquote(t *testing.T, s string, i int, w []byte) ([]byte, int) {
	t.Helper()
	named := map[byte]byte{'a': '\a', 'b': '\b', 't': '\t', 'n': '\n', 'v': '\v', 'f': '\f', 'r': '\r', '\\': '\\', '\'': '\''}
	hexLen := map[byte]int{'x': 2, 'u': 4, 'U': 8}
	for i < len(s) {
		c := s[i]
		if c == '\'' {
			return w, i + 1
		}
		if c != '\\' || i+1 >= len(s) {
			w, i = append(w, c), i+1
			continue
		}
		e := s[i+1]
		if b, ok := named[e]; ok {
			w, i = append(w, b), i+2
			continue
		}
		n, ok := hexLen[e]
		if !ok || i+2+n > len(s) {
			t.Fatalf("%s: unknown escape at %d", s, i)
		}
		v, err := strconv.ParseUint(s[i+2:i+2+n], 16, 32)
		if err != nil {
			t.Fatalf("%s: bad escape at %d: %v", s, i, err)
		}
		if e == 'x' {
			w = append(w, byte(v))
		} else {
			w = utf8.AppendRune(w, rune(v))
		}
		i += 2 + n
	}
	t.Fatalf("%s: unterminated $'", s)
	return nil, 0
}
