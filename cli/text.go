package cli

// Text the CLI prints comes from servers, audit files, policies, peers and
// requests: none of it may reach a terminal raw. A crafted argument, reason
// or hostname could otherwise forge a line ("\ncoily: approved"), move the
// cursor (ESC [ 2 A), overwrite a line (CR), set the clipboard (OSC 52),
// hide a link (OSC 8) or reorder what the approver reads (a bidi
// override). Every human-readable line goes through PrintLine; argv goes
// through Argv first; JSON output goes through JSON.
//
// What is escaped: every rune that is not graphic (unicode.IsGraphic): the
// C0 controls, DEL, the C1 controls, and the format characters (bidi
// overrides, isolates and marks, zero-width characters, Unicode tags), line
// and paragraph separators, private-use and unassigned code points; and
// every byte that is not valid UTF-8. Ordinary text, non-ASCII letters and
// spaces included, is unchanged.

import (
	"fmt"
	"io"
	"strings"
	"unicode/utf16"
	"unicode/utf8"

	"coily.dev/coily/visible"
)

// PrintLine writes one line: the formatted text with everything that is
// not graphic escaped, then a newline. Escaping the whole line (not just
// the arguments known to be untrusted) keeps a value that was forgotten
// from reaching the terminal raw.
func PrintLine(w io.Writer, format string, args ...any) {
	fmt.Fprintln(w, Text(fmt.Sprintf(format, args...)))
}

// Text returns s with every rune that is not graphic, and every byte
// that is not valid UTF-8, written as a visible escape: \n, \t, \x1b, \x7f,
// \u009b, \u202e, \U000e0041, \xff. Backslashes stay as they are (free text
// is for reading, argv goes through Argv to stay unambiguous). The rules
// are package visible's, which the web console shares.
func Text(s string) string { return visible.Text(s) }

// Argv renders argv as a shell would read it back, one word per element
// (visible.Argv): a word of ordinary characters as it is, a word with
// spaces or shell metacharacters in single quotes, a word with anything
// Text escapes in bash's $'...' quoting. "a b" is 'a b', never two words;
// a real ESC is $'\x1b', the four characters \x1b are '\x1b'.
func Argv(argv []string) string { return visible.Argv(argv) }

// ShellWord renders one argument as Argv does.
func ShellWord(s string) string { return visible.Word(s) }

// graphic reports whether the rune r, decoded from size bytes, is printed
// as it is.
func graphic(r rune, size int) bool { return visible.Graphic(r, size) }

// JSON makes encoded JSON safe for a terminal without changing what it
// decodes to: encoding/json and protojson escape the C0 controls but pass
// DEL, the C1 controls and the bidi and other format characters through
// raw. Outside strings JSON is ASCII (and the encoders' only whitespace
// there is newlines and spaces), so every such rune is inside a string,
// where \uXXXX (a surrogate pair above U+FFFF) means the same rune. Invalid
// UTF-8, which neither encoder produces, becomes \ufffd.
func JSON(j []byte) []byte {
	var b strings.Builder
	for i := 0; i < len(j); {
		r, size := utf8.DecodeRune(j[i:])
		i += size
		switch {
		case r == '\n', graphic(r, size):
			b.WriteRune(r)
		case size == 1 && r == utf8.RuneError:
			b.WriteString(`\ufffd`)
		case r > 0xffff:
			r1, r2 := utf16.EncodeRune(r)
			fmt.Fprintf(&b, `\u%04x\u%04x`, r1, r2)
		default:
			fmt.Fprintf(&b, `\u%04x`, r)
		}
	}
	return []byte(b.String())
}
