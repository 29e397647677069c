package descriptor

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// Canonicalize serialises v as RFC 8785 (JSON Canonicalization Scheme)
// canonical JSON. v may be built from map[string]any, []any, string, bool,
// nil, int, int64, float64 and json.Number. Object members are sorted by the
// UTF-16 code units of their names, strings use the minimal escapes, and
// numbers are written as ECMAScript's Number.prototype.toString would write
// the nearest IEEE 754 double. NaN, infinities, strings that are not valid
// UTF-8, integers a double cannot hold exactly and malformed json.Numbers are
// refused.
func Canonicalize(v any) ([]byte, error) {
	var b []byte
	b, err := appendCanonical(b, v, 0)
	if err != nil {
		return nil, err
	}
	return b, nil
}

// maxCanonicalDepth bounds the recursion of Canonicalize and CanonicalizeJSON.
const maxCanonicalDepth = 10000

var errJCSDepth = errors.New("jcs: value nested too deeply")

func appendCanonical(b []byte, v any, depth int) ([]byte, error) {
	if depth > maxCanonicalDepth {
		return nil, errJCSDepth
	}
	switch v := v.(type) {
	case nil:
		return append(b, "null"...), nil
	case bool:
		if v {
			return append(b, "true"...), nil
		}
		return append(b, "false"...), nil
	case string:
		return appendString(b, v)
	case int:
		return appendInt(b, int64(v))
	case int64:
		return appendInt(b, v)
	case float64:
		return appendFloat(b, v)
	case json.Number:
		if !isJSONNumber(string(v)) {
			return nil, fmt.Errorf("jcs: %s is not a JSON number", quote(string(v)))
		}
		f, err := strconv.ParseFloat(string(v), 64)
		if err != nil && !errors.Is(err, strconv.ErrRange) {
			return nil, fmt.Errorf("jcs: number %s: %w", quote(string(v)), err)
		}
		return appendFloat(b, f) // an overflow is ±Inf, refused there
	case []any:
		b = append(b, '[')
		for i, e := range v {
			if i > 0 {
				b = append(b, ',')
			}
			var err error
			if b, err = appendCanonical(b, e, depth+1); err != nil {
				return nil, err
			}
		}
		return append(b, ']'), nil
	case map[string]any:
		keys := make([]string, 0, len(v))
		for k := range v {
			if !utf8.ValidString(k) {
				return nil, errors.New("jcs: member name is not valid UTF-8")
			}
			keys = append(keys, k)
		}
		sortUTF16(keys)
		b = append(b, '{')
		for i, k := range keys {
			if i > 0 {
				b = append(b, ',')
			}
			b, _ = appendString(b, k)
			b = append(b, ':')
			var err error
			if b, err = appendCanonical(b, v[k], depth+1); err != nil {
				return nil, err
			}
		}
		return append(b, '}'), nil
	default:
		return nil, fmt.Errorf("jcs: cannot canonicalise a %T", v)
	}
}

// sortUTF16 sorts names by their UTF-16 code units (RFC 8785 section 3.2.3).
func sortUTF16(keys []string) {
	if len(keys) < 2 {
		return
	}
	units := make(map[string][]uint16, len(keys))
	for _, k := range keys {
		units[k] = utf16.Encode([]rune(k))
	}
	slices.SortFunc(keys, func(a, b string) int { return slices.Compare(units[a], units[b]) })
}

const hexDigits = "0123456789abcdef"

// appendString writes s as a JSON string with RFC 8785's escapes: \b \t \n
// \f \r \" \\ by name, other control characters as \u00xx (lower-case hex),
// everything else as literal UTF-8.
func appendString(b []byte, s string) ([]byte, error) {
	if !utf8.ValidString(s) {
		return nil, errors.New("jcs: string is not valid UTF-8")
	}
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		b = append(b, s[start:i]...)
		switch c {
		case '"':
			b = append(b, '\\', '"')
		case '\\':
			b = append(b, '\\', '\\')
		case '\b':
			b = append(b, '\\', 'b')
		case '\t':
			b = append(b, '\\', 't')
		case '\n':
			b = append(b, '\\', 'n')
		case '\f':
			b = append(b, '\\', 'f')
		case '\r':
			b = append(b, '\\', 'r')
		default:
			b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
		}
		start = i + 1
	}
	b = append(b, s[start:]...)
	return append(b, '"'), nil
}

func appendInt(b []byte, v int64) ([]byte, error) {
	f := float64(v)
	// float64(v) rounds; the value is exact only if it converts back. 2^63
	// does not fit an int64, so it is checked first.
	if f >= 0x1p63 || int64(f) != v {
		return nil, fmt.Errorf("jcs: integer %d is not exactly representable as a double", v)
	}
	return appendFloat(b, f)
}

func appendFloat(b []byte, f float64) ([]byte, error) {
	s, err := formatNumber(f)
	if err != nil {
		return nil, err
	}
	return append(b, s...), nil
}

// formatNumber formats f as ECMAScript's Number.prototype.toString does
// (ECMA-262 Number::toString, the form RFC 8785 requires): the shortest
// decimal that round-trips, in plain notation for exponents from -7 to 20
// and in exponent notation ("1e+21", "5e-324") otherwise. -0 is "0"; NaN and
// the infinities are refused.
func formatNumber(f float64) (string, error) {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return "", fmt.Errorf("jcs: %v is not a JSON number", f)
	}
	if f == 0 {
		return "0", nil // also -0
	}
	var sign string
	if f < 0 {
		sign, f = "-", -f
	}
	// Shortest round-trip digits; Go picks the closest among equally short
	// candidates, as ECMAScript does. The form is d[.ddd]e±XX.
	e := strconv.FormatFloat(f, 'e', -1, 64)
	mant, exp, _ := strings.Cut(e, "e")
	digits := strings.Replace(mant, ".", "", 1)
	x, err := strconv.Atoi(exp)
	if err != nil {
		return "", fmt.Errorf("jcs: formatting %v: %w", f, err)
	}
	k := len(digits) // number of significant digits
	n := x + 1       // position of the decimal point relative to the digits
	var s string
	switch {
	case k <= n && n <= 21:
		s = digits + strings.Repeat("0", n-k)
	case 0 < n && n <= 21:
		s = digits[:n] + "." + digits[n:]
	case -6 < n && n <= 0:
		s = "0." + strings.Repeat("0", -n) + digits
	default:
		s = digits[:1]
		if k > 1 {
			s += "." + digits[1:]
		}
		if n-1 >= 0 {
			s += "e+" + strconv.Itoa(n-1)
		} else {
			s += "e-" + strconv.Itoa(1-n)
		}
	}
	return sign + s, nil
}

// isJSONNumber reports whether s matches RFC 8259's number grammar:
// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func isJSONNumber(s string) bool {
	i := 0
	if i < len(s) && s[i] == '-' {
		i++
	}
	switch {
	case i < len(s) && s[i] == '0':
		i++
	case i < len(s) && s[i] >= '1' && s[i] <= '9':
		for i < len(s) && isDigit(s[i]) {
			i++
		}
	default:
		return false
	}
	if i < len(s) && s[i] == '.' {
		i++
		if i >= len(s) || !isDigit(s[i]) {
			return false
		}
		for i < len(s) && isDigit(s[i]) {
			i++
		}
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		if i >= len(s) || !isDigit(s[i]) {
			return false
		}
		for i < len(s) && isDigit(s[i]) {
			i++
		}
	}
	return i == len(s)
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }
