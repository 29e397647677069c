package descriptor

import (
	"encoding/base64"
	"errors"
	"regexp"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// The protocol's versions. Version 1 is commands, teardowns and their
// responses; VersionGit is version 1 with the git exchange and its answer
// (docs/protocol.md §4.5), which only files of that version may carry: a
// reader of version 1 alone refuses them whole.
const (
	Version    = 1
	VersionGit = 2
)

// KeySize is the length of a sandbox key in bytes.
const KeySize = 32

// Limits on request fields.
const (
	MaxArgs      = 1024     // argv entries
	MaxArgBytes  = 64 << 10 // bytes in one argv entry
	MaxCwdBytes  = 4096     // bytes in cwd
	MaxEnv       = 256      // env entries
	MaxStdin     = 1 << 20  // bytes of stdin, after base64 decoding
	MaxNoteBytes = 1024     // bytes in note
	MaxTimeout   = 86400    // seconds
	MinNonce     = 22       // characters in a nonce
	MaxNonce     = 128      // characters in a nonce
	maxMessage   = 64 << 10 // bytes in a response's message
	maxLabel     = 1024     // bytes in a response's audit_id and rule
)

// The field grammars, compiled the first time they are needed (not at
// start: every coily process links this package, and most never read a
// descriptor).
var (
	uuidRE  = lazyRE(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)
	nonceRE = lazyRE(`^[A-Za-z0-9_-]{22,128}$`)
	// SandboxNamePattern is the grammar of sandbox (signing key) names.
	SandboxNamePattern = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)
	envNameRE          = lazyRE(`^[A-Za-z_][A-Za-z0-9_]*$`)
	hmacRE             = lazyRE(`^[0-9a-f]{64}$`)
	codeRE             = lazyRE(`^[a-z][a-z0-9-]{0,63}$`)
	// RFC 3339 date-time, upper-case T and Z, at most nanosecond precision.
	timeRE = lazyRE(`^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,9})?(Z|[+-][0-9]{2}:[0-9]{2})$`)
)

// lazyRE compiles expr once, when first called.
func lazyRE(expr string) func() *regexp.Regexp {
	return sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(expr) })
}

// decoder applies the field rules to a parsed tree. Its messages name the
// field and never show a value.
type decoder struct{ src *source }

func (d *decoder) fail(field string, v *value, format string, args ...any) *Error {
	return d.src.errAt(field, v.pos, format, args...)
}

func kindName(k kind) string {
	switch k {
	case kindObject:
		return "a mapping"
	case kindArray:
		return "a sequence"
	case kindString:
		return "a string"
	case kindInt, kindNumber:
		return "a number"
	case kindBool:
		return "a boolean"
	default:
		return "null"
	}
}

func (d *decoder) str(field string, v *value) (string, error) {
	if v.kind != kindString {
		return "", d.fail(field, v, "must be a string, not %s", kindName(v.kind))
	}
	if !utf8.ValidString(v.str) {
		return "", d.fail(field, v, "not valid UTF-8")
	}
	return v.str, nil
}

// text is a string of at most max bytes without NUL.
func (d *decoder) text(field string, v *value, max int) (string, error) {
	s, err := d.str(field, v)
	if err != nil {
		return "", err
	}
	if len(s) > max {
		return "", d.fail(field, v, "longer than %d bytes", max)
	}
	if strings.IndexByte(s, 0) >= 0 {
		return "", d.fail(field, v, "must not contain NUL")
	}
	return s, nil
}

func (d *decoder) match(field string, v *value, re *regexp.Regexp, want string) (string, error) {
	s, err := d.str(field, v)
	if err != nil {
		return "", err
	}
	if !re.MatchString(s) {
		return "", d.fail(field, v, "must be %s", want)
	}
	return s, nil
}

func (d *decoder) integer(field string, v *value, lo, hi int64) (int64, error) {
	if v.kind != kindInt {
		return 0, d.fail(field, v, "must be an integer, not %s", kindName(v.kind))
	}
	if v.n < lo || v.n > hi {
		return 0, d.fail(field, v, "must be from %d to %d", lo, hi)
	}
	return v.n, nil
}

func (d *decoder) boolean(field string, v *value) (bool, error) {
	if v.kind != kindBool {
		return false, d.fail(field, v, "must be a boolean, not %s", kindName(v.kind))
	}
	return v.b, nil
}

func (d *decoder) version(v *value) (int, error) {
	if v.kind != kindInt {
		return 0, d.fail("version", v, "must be an integer, not %s", kindName(v.kind))
	}
	if v.n != Version && v.n != VersionGit {
		return 0, d.fail("version", v, "unsupported version (this reader knows versions %d and %d)", Version, VersionGit)
	}
	return int(v.n), nil
}

func (d *decoder) id(field string, v *value) (string, error) {
	return d.match(field, v, uuidRE(), "a UUID in lower-case 8-4-4-4-12 hex form")
}

// timestamp returns the instant (in UTC) and the text it was written as.
func (d *decoder) timestamp(field string, v *value) (time.Time, string, error) {
	s, err := d.match(field, v, timeRE(), "an RFC 3339 timestamp such as 2006-01-02T15:04:05Z")
	if err != nil {
		return time.Time{}, "", err
	}
	t, perr := time.Parse(time.RFC3339Nano, s)
	if n := len(s); s[n-1] != 'Z' {
		// time.Parse allows offsets up to +24:00 and minutes up to 60.
		if h1, h2, m1 := s[n-5], s[n-4], s[n-2]; h1 > '2' || h1 == '2' && h2 > '3' || m1 > '5' {
			perr = errors.New("offset out of range")
		}
	}
	if perr != nil {
		return time.Time{}, "", d.fail(field, v, "not a valid date and time")
	}
	return t.UTC(), s, nil
}

// base64 decodes standard, padded base64 of at most max decoded bytes.
func (d *decoder) base64(field string, v *value, max int) ([]byte, error) {
	s, err := d.str(field, v)
	if err != nil {
		return nil, err
	}
	if len(s) > (max+2)/3*4 {
		return nil, d.fail(field, v, "decodes to more than %d bytes", max)
	}
	// The decoder skips CR and LF; refuse them (and anything else outside
	// the alphabet) so one byte string has one encoding.
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '+' || c == '/' || c == '=') {
			return nil, d.fail(field, v, "must be standard padded base64")
		}
	}
	b, derr := base64.StdEncoding.Strict().DecodeString(s)
	if derr != nil {
		return nil, d.fail(field, v, "must be standard padded base64")
	}
	if len(b) > max {
		return nil, d.fail(field, v, "decodes to more than %d bytes", max)
	}
	return b, nil
}

func (d *decoder) missing(field string) *Error {
	return &Error{Code: CodeBadRequest, Field: field, Msg: "missing (required)"}
}

// header holds the fields requests and teardowns share.
type header struct {
	version    int
	id         string
	createdAt  time.Time
	createdRaw string
	nonce      string
	sandbox    string
	hmac       *value
	seen       int // how many of the required header fields were present
}

// headerField decodes m if it is a header field and reports whether it was.
func (d *decoder) headerField(m member, h *header) (bool, error) {
	var err error
	switch m.key {
	case "version":
		h.version, err = d.version(m.val)
	case "id":
		h.id, err = d.id("id", m.val)
	case "created_at":
		h.createdAt, h.createdRaw, err = d.timestamp("created_at", m.val)
	case "nonce":
		h.nonce, err = d.match("nonce", m.val, nonceRE(), "22 to 128 characters of A-Z a-z 0-9 _ -")
	case "sandbox":
		h.sandbox, err = d.match("sandbox", m.val, SandboxNamePattern, "a key name: a-z 0-9 and '-', at most 63 characters, not starting with '-'")
	case "hmac":
		h.hmac = m.val
		return true, nil // checked last, as a signature failure
	default:
		return false, nil
	}
	h.seen++
	return true, err
}

// finishHeader checks the required header fields are there and, if requireHMAC,
// that the signature is well-formed; it returns the signature.
func (d *decoder) finishHeader(root *value, h *header, requireHMAC bool) (string, error) {
	if h.seen < 5 {
		for _, f := range []string{"version", "id", "created_at", "nonce", "sandbox"} {
			if root.get(f) == nil {
				return "", d.missing(f)
			}
		}
	}
	if !requireHMAC {
		if h.hmac != nil {
			return "", d.fail("hmac", h.hmac, "not expected here")
		}
		return "", nil
	}
	if h.hmac == nil {
		return "", &Error{Code: CodeHMACFail, Field: "hmac", Msg: "missing: the file is not signed"}
	}
	if h.hmac.kind != kindString || !hmacRE().MatchString(h.hmac.str) {
		e := d.fail("hmac", h.hmac, "must be 64 lower-case hex digits")
		e.Code = CodeHMACFail
		return "", e
	}
	return h.hmac.str, nil
}

func unknown(d *decoder, m member) *Error {
	return d.src.errAt("", m.keyPos, "unknown field %s", quote(m.key))
}
