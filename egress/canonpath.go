package egress

import (
	"errors"
	"fmt"
	"strings"
)

// errPath is a request path refused on an inspected connection.
var errPath = errors.New("path refused")

// canonPath is the one form of a request path (as sent: escaped, query
// stripped) that the http rules check, the injections match and the
// upstream receives. Percent-encoded unreserved characters are decoded
// (RFC 3986 §6.2.2.2) and other escapes upper-cased. A path another hop
// could read as a different one is refused: a "." or ".." segment
// (literal or encoded, any case, or before a ";param" as Tomcat reads
// it), an encoded "/", "\" or NUL, a backslash, an empty inner segment,
// an invalid escape, or a raw byte that is not visible ASCII.
func canonPath(p string) (string, error) {
	if !strings.HasPrefix(p, "/") || len(p) > maxHeaderBytes {
		return "", fmt.Errorf("%w: not an absolute path", errPath)
	}
	var b strings.Builder
	b.Grow(len(p))
	for i := 0; i < len(p); i++ {
		c := p[i]
		switch {
		case c == '%':
			if i+2 >= len(p) || !isHex(p[i+1]) || !isHex(p[i+2]) {
				return "", fmt.Errorf("%w: an invalid percent escape", errPath)
			}
			d := unhex(p[i+1])<<4 | unhex(p[i+2])
			i += 2
			switch {
			case d == '/' || d == '\\' || d == 0:
				return "", fmt.Errorf("%w: an encoded /, \\ or NUL", errPath)
			case unreserved(d):
				b.WriteByte(d)
			default:
				writeEscape(&b, d)
			}
		case c == '\\':
			return "", fmt.Errorf("%w: a backslash", errPath)
		case c <= ' ' || c >= 0x7f:
			return "", fmt.Errorf("%w: a control byte, space or non-ASCII byte", errPath)
		case unreserved(c) || strings.IndexByte(pathDelims, c) >= 0:
			b.WriteByte(c)
		default: // visible ASCII a path may not hold raw ("<>[]^`{|}): encoded, as net/http would send it
			writeEscape(&b, c)
		}
	}
	out := b.String()
	segs := strings.Split(out[1:], "/")
	for i, seg := range segs {
		name, _, _ := strings.Cut(seg, ";")
		switch {
		case name == "." || name == "..":
			return "", fmt.Errorf("%w: a dot segment", errPath)
		case seg == "" && i != len(segs)-1:
			return "", fmt.Errorf("%w: an empty segment (//)", errPath)
		}
	}
	return out, nil
}

// pathDelims are the characters other than unreserved ones a path
// segment holds raw (RFC 3986 §3.3 pchar, and "/").
const pathDelims = "!$&'()*+,;=:@/"

const upperHex = "0123456789ABCDEF"

func writeEscape(b *strings.Builder, c byte) {
	b.WriteByte('%')
	b.WriteByte(upperHex[c>>4])
	b.WriteByte(upperHex[c&15])
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case c <= '9':
		return c - '0'
	case c <= 'F':
		return c - 'A' + 10
	}
	return c - 'a' + 10
}

// unreserved: ALPHA / DIGIT / "-" / "." / "_" / "~" (RFC 3986 §2.3).
func unreserved(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~'
}
