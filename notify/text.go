package notify

import (
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Bounds of the text put in a notification.
const (
	maxName    = 128  // a principal, a rule name, an id
	maxReason  = 300  // a lockout or pause reason
	maxArgv    = 1000 // the argv line, with include_argv
	maxMessage = 3500 // ntfy turns a message over 4096 bytes into an attachment
)

// clean makes caller text safe for a title, a message line or a label: it
// replaces every control character (CR and LF included), formatting
// character (bidirectional overrides, zero-width characters), line or
// paragraph separator and invalid byte with "?", and cuts the result to
// limit bytes (on a rune boundary, marked with "…").
func clean(s string, limit int) string {
	var b strings.Builder
	for i, r := range s {
		if r == utf8.RuneError {
			if _, size := utf8.DecodeRuneInString(s[i:]); size == 1 {
				r = '?'
			}
		}
		if unsafeRune(r) {
			r = '?'
		}
		if b.Len()+utf8.RuneLen(r) > limit {
			return cut(b.String()+string(r), limit)
		}
		b.WriteRune(r)
	}
	return b.String()
}

// unsafeRune reports a rune that could forge structure or hide text.
func unsafeRune(r rune) bool {
	return unicode.IsControl(r) || unicode.Is(unicode.Cf, r) || unicode.Is(unicode.Zl, r) || unicode.Is(unicode.Zp, r)
}

// cut shortens s to at most limit bytes, ending in "…".
func cut(s string, limit int) string {
	const ell = "…"
	if len(s) <= limit {
		return s
	}
	n := max(limit-len(ell), 0)
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + ell
}

// argvLine renders argv on one line: plain words as they are, anything
// else quoted with Go's escapes (so control and formatting characters show
// as \n, \u202e, …), bounded to maxArgv bytes.
func argvLine(argv []string) string {
	var b strings.Builder
	for i, a := range argv {
		if i > 0 {
			b.WriteByte(' ')
		}
		if plainWord(a) {
			b.WriteString(a)
		} else {
			b.WriteString(strconv.QuoteToASCII(a))
		}
		if b.Len() > maxArgv {
			break
		}
	}
	return cut(b.String(), maxArgv)
}

// plainWord reports an argument that needs no quoting.
func plainWord(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range []byte(s) {
		if c <= ' ' || c >= 0x7f || strings.IndexByte(`"'\$`+"`", c) >= 0 {
			return false
		}
	}
	return true
}
