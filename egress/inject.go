package egress

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/textproto"
	"strings"
)

// PlaceholderPrefix starts every placeholder: the worthless value the
// child holds where its credential would be.
const PlaceholderPrefix = "coily-placeholder-"

// NewPlaceholder is a fresh placeholder: the prefix and 128 random bits.
func NewPlaceholder() string {
	var b [16]byte
	rand.Read(b[:]) // never fails (crypto/rand)
	return PlaceholderPrefix + hex.EncodeToString(b[:])
}

// Form says where an injected credential goes in a request.
type Form int

const (
	// FormBearer: `Authorization: Bearer <secret>`.
	FormBearer Form = iota + 1
	// FormToken: `Authorization: token <secret>` (GitHub's older scheme).
	FormToken
	// FormBasic: `Authorization: Basic base64(user:<secret>)`, git over
	// HTTPS; the child's user name is kept.
	FormBasic
	// FormHeader: a named header whose whole value is the secret.
	FormHeader
	// FormSigV4: an AWS key; the child signs with placeholders and the
	// proxy re-signs the request (SigV4, header form) with the real key.
	FormSigV4
)

// ParseForm reads bearer, token, basic or header.
func ParseForm(s string) (Form, error) {
	switch s {
	case "bearer":
		return FormBearer, nil
	case "token":
		return FormToken, nil
	case "basic":
		return FormBasic, nil
	case "header":
		return FormHeader, nil
	case "sigv4":
		return FormSigV4, nil
	}
	return 0, fmt.Errorf("egress: injection form %q: want bearer, token, basic, header or sigv4", s)
}

func (f Form) String() string {
	switch f {
	case FormBearer:
		return "bearer"
	case FormToken:
		return "token"
	case FormBasic:
		return "basic"
	case FormHeader:
		return "header"
	case FormSigV4:
		return "sigv4"
	}
	return "?"
}

// Injection swaps one placeholder for its secret on the requests to Host
// whose path starts with PathPrefix, in the place Form says, and nowhere
// else.
type Injection struct {
	Placeholder string // NewPlaceholder
	Secret      string
	Host        string // an inspected host, exact
	Port        int    // the CONNECT port (0: 443)
	PathPrefix  string // "" or starting with "/"
	Form        Form
	Header      string // FormHeader's header name
	// AWS holds FormSigV4's other values: Placeholder then stands for
	// the access key id and Secret is the secret access key.
	AWS *AWSKey
}

// AWSKey is the rest of an AWS key injected by re-signing (FormSigV4).
type AWSKey struct {
	AccessKeyID  string // the real one
	SessionToken string // the real one; "" for a long-term key
	// SecretPlaceholder is what the child holds as its secret access key
	// (it signs with it; it is never sent, and refused if it is).
	SecretPlaceholder string
	// TokenPlaceholder is what the child holds as its session token,
	// sent as X-Amz-Security-Token; "" when Session token is "".
	TokenPlaceholder string
}

// placeholders are every value the child holds for the injection.
func (in Injection) placeholders() []string {
	out := []string{in.Placeholder}
	if in.AWS != nil {
		out = append(out, in.AWS.SecretPlaceholder)
		if in.AWS.TokenPlaceholder != "" {
			out = append(out, in.AWS.TokenPlaceholder)
		}
	}
	return out
}

// header is the request header the injection rewrites.
func (in Injection) header() string {
	if in.Form == FormHeader {
		return textproto.CanonicalMIMEHeaderKey(in.Header)
	}
	return "Authorization"
}

// matches reports whether a request to host:port (the CONNECT's) with
// path (canonPath's) is one the injection swaps the placeholder in.
func (in Injection) matches(host string, port int, path string) bool {
	want := in.Port
	if want == 0 {
		want = 443
	}
	return host == in.Host && port == want && pathHasPrefix(path, in.PathPrefix)
}

// pathHasPrefix: "" matches all; "/a" matches "/a", "/a/…" but not "/ab";
// "/a/" matches "/a/…".
func pathHasPrefix(path, prefix string) bool {
	if prefix == "" || prefix == "/" || path == prefix {
		return true
	}
	if strings.HasSuffix(prefix, "/") {
		return strings.HasPrefix(path, prefix)
	}
	return strings.HasPrefix(path, prefix+"/")
}

// swap replaces the placeholder in value, written in the injection's
// form, with the secret; ok false when value is not that form.
func (in Injection) swap(value string) (string, bool) {
	switch in.Form {
	case FormBearer, FormToken:
		scheme := "Bearer"
		if in.Form == FormToken {
			scheme = "token"
		}
		got, token, found := strings.Cut(value, " ")
		if !found || !strings.EqualFold(got, scheme) || token != in.Placeholder {
			return "", false
		}
		return scheme + " " + in.Secret, true
	case FormBasic:
		got, enc, found := strings.Cut(value, " ")
		if !found || !strings.EqualFold(got, "Basic") {
			return "", false
		}
		raw, err := base64.StdEncoding.DecodeString(enc)
		if err != nil {
			return "", false
		}
		user, pass, found := strings.Cut(string(raw), ":")
		if !found || pass != in.Placeholder || strings.Contains(user, PlaceholderPrefix) {
			return "", false
		}
		return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+in.Secret)), true
	case FormHeader:
		if value != in.Placeholder {
			return "", false
		}
		return in.Secret, true
	}
	return "", false
}

// placeholderError is a request refused for carrying a placeholder where
// it does not belong; its text is the 403's sentence.
type placeholderError struct{ where string }

func (e *placeholderError) Error() string {
	return "a credential placeholder was sent " + e.where + "; the egress proxy replaces it only in the request the rule names, so the request was refused"
}

// injectHeaders swaps every placeholder in h for its secret where an
// injection allows it, for a request to host:port with path; a placeholder
// anywhere else, or one sent encoded (base64 in a Basic header that is
// not the injection's), refuses the request. It reports the injections
// used.
func injectHeaders(h http.Header, host string, port int, path string, ins []Injection) ([]Injection, error) {
	var used []Injection
	for name, vals := range h {
		for i, v := range vals {
			in, ok := findInjection(ins, name, v, host, port, path)
			if ok {
				nv, _ := in.swap(v)
				vals[i] = nv
				used = append(used, in)
				continue
			}
			if containsPlaceholder(v, ins) || containsPlaceholder(name, ins) || basicHides(name, v, ins) {
				return nil, &placeholderError{where: fmt.Sprintf("in header %s to %s", name, host)}
			}
		}
	}
	return used, nil
}

func findInjection(ins []Injection, name, value, host string, port int, path string) (Injection, bool) {
	for _, in := range ins {
		if in.header() == name && in.matches(host, port, path) {
			if _, ok := in.swap(value); ok {
				return in, true
			}
		}
	}
	return Injection{}, false
}

// basicHides reports a Basic Authorization header whose decoded text
// carries a placeholder (one no injection took).
func basicHides(name, v string, ins []Injection) bool {
	if name != "Authorization" && name != "Proxy-Authorization" {
		return false
	}
	scheme, enc, ok := strings.Cut(v, " ")
	if !ok || !strings.EqualFold(scheme, "Basic") {
		return false
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(enc))
	return err == nil && containsPlaceholder(string(raw), ins)
}

// containsPlaceholder reports s holding any injection's placeholder.
func containsPlaceholder(s string, ins []Injection) bool {
	for _, in := range ins {
		for _, ph := range in.placeholders() {
			if ph != "" && strings.Contains(s, ph) {
				return true
			}
		}
	}
	return false
}

// errBodyPlaceholder ends a request body that carries a placeholder.
var errBodyPlaceholder = errors.New("egress: credential placeholder in a request body")

// scanReader passes a body through, holding back the bytes that could
// begin a placeholder until it knows they do not: a placeholder in the
// body is never forwarded, not even in part across reads. It fails with
// errBodyPlaceholder on one (and sets found) and with errBodyCap past
// max bytes (max <= 0: no cap).
type scanReader struct {
	r       io.Reader
	needles [][]byte
	keep    int // longest needle - 1
	max     int64
	n       int64
	buf     []byte // read, not yet passed on
	out     []byte // safe to pass on
	err     error
	found   bool
	capped  bool
}

// errBodyCap ends a request body over its rule's cap.
var errBodyCap = errors.New("egress: request body over the rule's cap")

func newScanReader(r io.Reader, ins []Injection, max int64) *scanReader {
	s := &scanReader{r: r, max: max}
	for _, in := range ins {
		for _, ph := range in.placeholders() {
			s.needles = append(s.needles, []byte(ph))
			s.keep = max0(s.keep, len(ph)-1)
		}
	}
	return s
}

func max0(a, b int) int {
	if b > a {
		return b
	}
	return a
}

func (s *scanReader) Read(p []byte) (int, error) {
	for len(s.out) == 0 {
		if s.err != nil {
			return 0, s.err
		}
		chunk := make([]byte, 32<<10)
		n, err := s.r.Read(chunk)
		s.n += int64(n)
		s.buf = append(s.buf, chunk[:n]...)
		for _, nd := range s.needles {
			if bytes.Contains(s.buf, nd) {
				s.found, s.buf, s.err = true, nil, errBodyPlaceholder
				return 0, s.err
			}
		}
		if s.max > 0 && s.n > s.max {
			s.capped, s.buf, s.err = true, nil, errBodyCap
			return 0, s.err
		}
		if err != nil {
			s.out, s.buf, s.err = s.buf, nil, err // at the end nothing more can complete a needle
			continue
		}
		if cut := len(s.buf) - s.keep; cut > 0 {
			s.out = append(s.out, s.buf[:cut]...)
			s.buf = append([]byte(nil), s.buf[cut:]...)
		}
	}
	n := copy(p, s.out)
	s.out = s.out[n:]
	return n, nil
}

func (s *scanReader) Close() error { return nil }
