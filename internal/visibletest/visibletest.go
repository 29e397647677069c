// Package visibletest holds what the tests of text shown to people share
// (package visible, the CLI's printing, the console): the hostile inputs
// and what a reader must see instead, a check that text is safe for a
// terminal, and a reader of shell-quoted argv. Tests only.
package visibletest

import (
	"reflect"
	"strconv"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

// HostileText is what an agent, a peer or a tampered audit file could put
// in front of an approver, with what a reader must see instead.
var HostileText = []struct{ Name, In, Want string }{
	{"CSI cursor up", "\x1b[2A", `\x1b[2A`},
	{"CSI erase line and overwrite", "\x1b[2K\rcoily: approved", `\x1b[2K\rcoily: approved`},
	{"OSC 8 hyperlink", "\x1b]8;;https://evil.example/\x1b\\click\x1b]8;;\x1b\\", `\x1b]8;;https://evil.example/\x1b\click\x1b]8;;\x1b\`},
	{"OSC 52 clipboard", "\x1b]52;c;cm0gLXJmIH4K\a", `\x1b]52;c;cm0gLXJmIH4K\a`},
	{"DCS", "\x1bP+q544e\x1b\\", `\x1bP+q544e\x1b\`},
	{"carriage return overwrite", "rm -rf /\rls -l   ", `rm -rf /\rls -l   `},
	{"forged line", "x\ncoily: approved", `x\ncoily: approved`},
	{"CRLF", "a\r\nb", `a\r\nb`},
	{"C0 named", "\a\b\t\n\v\f\r", `\a\b\t\n\v\f\r`},
	{"C0 other and DEL", "\x00\x01\x1f\x7f", `\x00\x01\x1f\x7f`},
	{"C1 CSI as a rune", "\u009b2A\u0085", `\u009b2A\u0085`},
	{"C1 CSI as a raw byte", "\x9b2A", `\x9b2A`},
	{"bidi override", "evil\u202egnp.exe", `evil\u202egnp.exe`},
	{"bidi embeddings and pop", "\u202a\u202b\u202c\u202d", `\u202a\u202b\u202c\u202d`},
	{"bidi isolates", "\u2066a\u2067b\u2068c\u2069", `\u2066a\u2067b\u2068c\u2069`},
	{"bidi marks", "\u200e\u200f\u061c", `\u200e\u200f\u061c`},
	{"zero width and BOM", "r\u200bm\ufeff", `r\u200bm\ufeff`},
	{"line and paragraph separators", "a\u2028b\u2029c", `a\u2028b\u2029c`},
	{"Unicode tags (hidden text)", "ok\U000e0041\U000e007f", `ok\U000e0041\U000e007f`},
	{"invalid UTF-8", "\xff\xfe", `\xff\xfe`},
	{"truncated UTF-8", "a\xe2\x80", `a\xe2\x80`},
	{"surrogate encoded in UTF-8", "\xed\xa0\x80", `\xed\xa0\x80`},
	{"plain ASCII", "coily: refused (policy-deny): no rule allows /bin/rm", "coily: refused (policy-deny): no rule allows /bin/rm"},
	{"non-ASCII letters", "héllo wörld ñ 日本語 Ελληνικά עברית", "héllo wörld ñ 日本語 Ελληνικά עברית"},
	{"emoji and symbols", "🙂 → ✓ €", "🙂 → ✓ €"},
	{"a written U+FFFD", "bad \ufffd here", "bad \ufffd here"},
	{"no-break space", "a\u00a0b", "a\u00a0b"},
	{"backslashes stay", `C:\x1b\n`, `C:\x1b\n`},
	{"empty", "", ""},
}

// HostileArgv are argument lists with what a reader must see instead:
// one shell word per element, read back as the same words.
var HostileArgv = []struct {
	Name string
	In   []string
	Want string
}{
	{"plain", []string{"/bin/echo", "hello", "--flag=v,w:x@y%z+1"}, `/bin/echo hello --flag=v,w:x@y%z+1`},
	{"space keeps one word", []string{"echo", "a b"}, `echo 'a b'`},
	{"two spaces", []string{"echo", "a", "", "b  c"}, `echo a '' 'b  c'`},
	{"single quote", []string{"echo", "it's"}, `echo 'it'\''s'`},
	{"shell metacharacters", []string{"sh", "-c", "$(id); `x` | * ~ & > <"}, `sh -c '$(id); ` + "`x`" + ` | * ~ & > <'`},
	{"real ESC", []string{"echo", "\x1b[2A"}, `echo $'\x1b[2A'`},
	{"the four characters \\x1b", []string{"echo", `\x1b[2A`}, `echo '\x1b[2A'`},
	{"forged line", []string{"echo", "x\ncoily: approved"}, `echo $'x\ncoily: approved'`},
	{"quote and backslash with a control", []string{"echo", "it's\\\r"}, `echo $'it\'s\\\r'`},
	{"OSC 52", []string{"printf", "\x1b]52;c;ZXZpbA==\a"}, `printf $'\x1b]52;c;ZXZpbA==\a'`},
	{"C1 CSI rune", []string{"echo", "\u009b2J"}, `echo $'\u009b2J'`},
	{"C1 CSI byte", []string{"echo", "\x9b2J"}, `echo $'\x9b2J'`},
	{"bidi override", []string{"cat", "\u202etxt.exe"}, `cat $'\u202etxt.exe'`},
	{"invalid UTF-8", []string{"cat", "\xff\xfe"}, `cat $'\xff\xfe'`},
	{"Unicode tag", []string{"echo", "\U000e0041"}, `echo $'\U000e0041'`},
	{"no-break space is quoted", []string{"rm", "a\u00a0b"}, "rm 'a\u00a0b'"},
	{"ideographic space is quoted", []string{"rm", "a\u3000b"}, "rm 'a\u3000b'"},
	{"non-ASCII letters bare", []string{"echo", "café", "日本"}, `echo café 日本`},
	{"empty argv", nil, ``},
}

// CheckVisible fails unless s is valid UTF-8 of graphic runes only:
// no C0 control (newline included), DEL, C1 control, bidi or other format
// character.
func CheckVisible(t *testing.T, s string) {
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

// SameArgv reports whether two argument lists are the same (nil and empty
// alike).
func SameArgv(a, b []string) bool {
	return len(a) == len(b) && (len(a) == 0 || reflect.DeepEqual(a, b))
}

// ShellSplit reads visible.Argv's output back as a POSIX shell with $'...'
// would: words separated by single spaces; bare characters, '...' and
// $'...' parts, and \' between parts.
func ShellSplit(t *testing.T, s string) []string {
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
