package descriptor

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"coily.dev/coily/refusal"
)

// Refusal codes carried by *Error: coily's refusal codes, declared once in
// package refusal, so a bridge passes them on unchanged.
const (
	// CodeBadRequest: the file is malformed or breaks a limit.
	CodeBadRequest = string(refusal.BadRequest)
	// CodeHMACFail: the signature is missing, malformed or does not match.
	CodeHMACFail = string(refusal.HMACFail)
)

// ErrKeySize is returned (it is not an *Error: it is the caller's fault, not
// the file's) when a key is not KeySize bytes long.
var ErrKeySize = errors.New("descriptor: key must be 32 bytes")

// Error is a refusal of a descriptor. Its message never carries more than a
// short, quoted prefix of a value from the file, and never a value of a
// field that may be secret (env values, stdin, note).
type Error struct {
	// Code is CodeBadRequest or CodeHMACFail.
	Code string
	// Field names the offending member, e.g. "argv[3]" or `env["PATH"]`;
	// empty when the problem is with the file as a whole.
	Field string
	// Line and Column (1-based, column counted in characters) locate the
	// offending value when known; zero otherwise.
	Line, Column int
	// Msg says what is wrong.
	Msg string
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.Code)
	b.WriteString(": ")
	var at string
	switch {
	case e.Line > 0 && e.Column > 0:
		at = fmt.Sprintf("line %d:%d", e.Line, e.Column)
	case e.Line > 0:
		at = fmt.Sprintf("line %d", e.Line)
	}
	switch {
	case e.Field != "" && at != "":
		fmt.Fprintf(&b, "%s (%s): ", e.Field, at)
	case e.Field != "":
		b.WriteString(e.Field + ": ")
	case at != "":
		b.WriteString(at + ": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

func badf(format string, args ...any) *Error {
	return &Error{Code: CodeBadRequest, Msg: fmt.Sprintf(format, args...)}
}

// maxEcho is the most bytes of a value from the file an error message shows.
const maxEcho = 32

// quote returns s quoted for an error message, cut to at most maxEcho bytes
// of s (on a character boundary) with "..." marking the cut. It is only used
// on names and short identifiers, never on values that may be secret.
func quote(s string) string {
	if len(s) <= maxEcho {
		return strconv.Quote(s)
	}
	cut := maxEcho
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return strconv.Quote(s[:cut]) + "..."
}
