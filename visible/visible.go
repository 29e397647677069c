// Package visible renders untrusted text so that what a person reads is
// what the text holds: the CLI's terminal lines and the web console's
// pages show arguments, reasons, principals and host names that came from
// agents, peers and files, and none of it may reach a reader raw.
//
// A crafted string could otherwise forge a line ("\ncoily: approved"),
// move a terminal's cursor or overwrite a line (ESC [ 2 A, CR), set the
// clipboard (OSC 52), hide a link (OSC 8), or reorder what an approver
// reads in a terminal or a browser alike (a bidi override: "evil\u202egnp.exe"
// shows as "evilexe.png").
//
// What is escaped: every rune that is not graphic (unicode.IsGraphic): the
// C0 controls, DEL, the C1 controls, and the format characters (bidi
// overrides, isolates and marks, zero-width characters, Unicode tags), line
// and paragraph separators, private-use and unassigned code points; and
// every byte that is not valid UTF-8. Ordinary text, non-ASCII letters and
// spaces included, is unchanged. The output is valid UTF-8 of graphic runes
// only, and escaping it again changes nothing.
//
// HTML is not this package's concern: a page still inserts the result as
// text (textContent, html/template), never as markup.
package visible

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Text returns s with every rune that is not graphic, and every byte that
// is not valid UTF-8, written as a visible escape: \n, \t, \x1b, \x7f,
// \u009b, \u202e, \U000e0041, \xff. Backslashes stay as they are (free
// text is for reading; argv goes through Argv to stay unambiguous).
func Text(s string) string {
	if Clean(s) {
		return s
	}
	var b strings.Builder
	escapeTo(&b, s, false)
	return b.String()
}

// Argv renders argv as a shell would read it back, one word per element:
// a word of ordinary characters as it is, a word with spaces or shell
// metacharacters in single quotes, a word with anything Text escapes in
// bash's $'...' quoting (with \\ and \' inside). The result is
// unambiguous: "a b" is 'a b', never two words; a real ESC is $'\x1b', the
// four characters \x1b are '\x1b'.
func Argv(argv []string) string {
	words := make([]string, len(argv))
	for i, a := range argv {
		words[i] = Word(a)
	}
	return strings.Join(words, " ")
}

// Word renders one argument as Argv does.
func Word(s string) string {
	switch {
	case s == "":
		return "''"
	case !Clean(s):
		var b strings.Builder
		b.WriteString("$'")
		escapeTo(&b, s, true)
		b.WriteString("'")
		return b.String()
	case strings.IndexFunc(s, needsQuote) < 0:
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// needsQuote reports whether r makes a word need quotes: anything but
// letters, digits and @%+=:,./-_ (Python's shlex.quote set), non-ASCII
// letters and symbols allowed, spaces of any kind not.
func needsQuote(r rune) bool {
	switch {
	case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
		return false
	case strings.ContainsRune("@%+=:,./-_", r):
		return false
	case r >= utf8.RuneSelf:
		return unicode.IsSpace(r)
	}
	return true
}

// Clean reports whether s is valid UTF-8 made only of graphic runes: what
// Text leaves as it is.
func Clean(s string) bool {
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if !Graphic(r, size) {
			return false
		}
		i += size
	}
	return true
}

// Graphic reports whether the rune r, decoded from size bytes, is shown as
// it is: a graphic rune, not an invalid byte (r is utf8.RuneError with size
// 1 for those; a U+FFFD written in the text is graphic).
func Graphic(r rune, size int) bool {
	if r < utf8.RuneSelf {
		return r >= 0x20 && r != 0x7f
	}
	return size > 1 && unicode.IsGraphic(r)
}

// escapeTo writes s to b with what Clean refuses escaped; quoted, for a
// $'...' word, also escapes \ and '.
func escapeTo(b *strings.Builder, s string, quoted bool) {
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			fmt.Fprintf(b, `\x%02x`, s[i])
			i++
			continue
		}
		i += size
		switch {
		case quoted && (r == '\\' || r == '\''):
			b.WriteByte('\\')
			b.WriteRune(r)
		case r < 0x20 || r == 0x7f:
			b.WriteString(controlEscape(r))
		case Graphic(r, size):
			b.WriteRune(r)
		case r <= 0xffff:
			fmt.Fprintf(b, `\u%04x`, r)
		default:
			fmt.Fprintf(b, `\U%08x`, r)
		}
	}
}

func controlEscape(r rune) string {
	switch r {
	case '\a':
		return `\a`
	case '\b':
		return `\b`
	case '\t':
		return `\t`
	case '\n':
		return `\n`
	case '\v':
		return `\v`
	case '\f':
		return `\f`
	case '\r':
		return `\r`
	}
	return fmt.Sprintf(`\x%02x`, r)
}
