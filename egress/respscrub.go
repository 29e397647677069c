package egress

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
)

// An upstream that echoes a request's headers (a debugging endpoint, an
// error page quoting the request, a hostile server on an inspected host)
// would hand the child the secret the proxy injected. Every response from
// an inspected host therefore goes back with each injection's secret, and
// each header value the proxy rewrote, replaced by what the child sent:
// the placeholder, in the same form.

// replacement is one string the child must not see and what it sees
// instead.
type replacement struct{ old, new []byte }

// replacements are the secrets of ins (for SigV4, the real key id, secret
// key and session token) and, for the header values swapped in this
// request (out's against in's, so after the re-signing), the swapped
// value and, for Basic auth, its base64 credentials, each mapped back to
// what the child sent, in every form of echoForms. Longer strings come
// first, so that one holding another is replaced whole.
func replacements(ins []Injection, in, out http.Header) []replacement {
	var rs []replacement
	seen := map[string]bool{}
	add := func(old, new string) {
		if old == "" || old == new {
			return
		}
		for _, f := range echoForms {
			if o := f(old); !seen[o] {
				seen[o] = true
				rs = append(rs, replacement{old: []byte(o), new: []byte(f(new))})
			}
		}
	}
	for name, vals := range out {
		orig := in[name]
		for i, v := range vals {
			if i >= len(orig) || orig[i] == v {
				continue
			}
			add(v, orig[i])
			if s, enc, ok := strings.Cut(v, " "); ok && strings.EqualFold(s, "Basic") {
				_, oenc, _ := strings.Cut(orig[i], " ")
				add(enc, oenc)
			}
		}
	}
	for _, in := range ins {
		if in.Form == FormSigV4 && in.AWS != nil {
			add(in.AWS.AccessKeyID, in.Placeholder)
			add(in.Secret, in.AWS.SecretPlaceholder)
			add(in.AWS.SessionToken, in.AWS.TokenPlaceholder)
			for _, v := range [][2]string{{in.AWS.AccessKeyID, in.Placeholder}, {in.AWS.SessionToken, in.AWS.TokenPlaceholder}} {
				if v[0] != "" {
					rs = append(rs, replacement{old: []byte(spacedHex(v[0])), new: []byte(spacedHex(v[1]))})
				}
			}
			continue
		}
		add(in.Secret, in.Placeholder)
		add(base64.StdEncoding.EncodeToString([]byte(in.Secret)), base64.StdEncoding.EncodeToString([]byte(in.Placeholder)))
	}
	return prune(rs)
}

// prune drops each replacement that the shorter ones already make (a
// header value swapped whole, "Bearer <secret>", is its secret's
// replacement in context): every string left costs a scan of each body
// read. It returns the rest longest first.
func prune(rs []replacement) []replacement {
	slices.SortStableFunc(rs, func(a, b replacement) int { return len(a.old) - len(b.old) })
	var kept []replacement // longest first
	for _, r := range rs {
		if replaceAll(string(r.old), kept) != string(r.new) {
			kept = slices.Insert(kept, 0, r)
		}
	}
	return kept
}

// echoForms are the forms an upstream may echo a value in: as is, in
// JSON as its encoders write strings, and percent-encoded (query and
// path escaping, upper- and lower-case hex). AWS tokens and base64 hold
// "/", "+" and "=", which each of these writes differently. A form that
// leaves a value as it is costs nothing (replacements keeps one of each).
var echoForms = []func(string) string{
	func(s string) string { return s },
	jsonPlain, // JSON.stringify, Python, Jackson
	func(s string) string { return strings.ReplaceAll(jsonPlain(s), "/", `\/`) }, // PHP's json_encode
	jsonForm("<>&", false),     // Go's encoding/json, Rails' to_json
	jsonForm("<>&='", false),   // Gson
	jsonForm("<>&'\"+`", true), // .NET's System.Text.Json
	url.QueryEscape,
	url.PathEscape,
	func(s string) string { return lowerHex(url.QueryEscape(s)) },
	func(s string) string { return lowerHex(url.PathEscape(s)) },
}

// jsonPlain writes a string's contents in JSON with only the quote and
// the backslash escaped.
var jsonPlain = jsonForm("", false)

// jsonForm writes a string's contents as a JSON encoder does: the bytes
// in hex as \u00XX escapes (upper-case hex when upper), a quote or a
// backslash not in hex after a backslash, everything else as is (a
// header value, which a secret is, holds no control bytes).
func jsonForm(hex string, upper bool) func(string) string {
	digits := "0123456789abcdef"
	if upper {
		digits = "0123456789ABCDEF"
	}
	return func(s string) string {
		var b strings.Builder
		for i := range len(s) {
			switch c := s[i]; {
			case strings.IndexByte(hex, c) >= 0:
				b.WriteString(`\u00`)
				b.WriteByte(digits[c>>4])
				b.WriteByte(digits[c&0xf])
			case c == '"' || c == '\\':
				b.WriteByte('\\')
				b.WriteByte(c)
			default:
				b.WriteByte(c)
			}
		}
		return b.String()
	}
}

// spacedHex writes s's bytes in lower-case hex, separated by spaces: how
// S3's SignatureDoesNotMatch quotes the canonical request it computed
// (CanonicalRequestBytes), session token included.
func spacedHex(s string) string {
	var b strings.Builder
	for i := range len(s) {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%02x", s[i])
	}
	return b.String()
}

// lowerHex writes s's percent escapes in lower-case hex.
func lowerHex(s string) string {
	b := []byte(s)
	for i := 0; i+2 < len(b); i++ {
		if b[i] == '%' {
			b[i+1], b[i+2] = lowerHexDigit(b[i+1]), lowerHexDigit(b[i+2])
			i += 2
		}
	}
	return string(b)
}

// injectsInto reports an injection into host:port, on any path. The
// responses of such a host are all scrubbed (an upstream may echo a
// secret of an earlier request, or one of another path); those of an
// inspected host no injection names, to a request the proxy injected
// nothing into, are not: the proxy sent that upstream no secret.
func injectsInto(ins []Injection, host string, port int) bool {
	for _, in := range ins {
		if in.matches(host, port, in.PathPrefix) {
			return true
		}
	}
	return false
}

// replaceAll applies rs to s.
func replaceAll(s string, rs []replacement) string {
	for _, r := range rs {
		s = strings.ReplaceAll(s, string(r.old), string(r.new))
	}
	return s
}

func lowerHexDigit(c byte) byte {
	if 'A' <= c && c <= 'F' {
		return c + 'a' - 'A'
	}
	return c
}

// errEncodedResponse refuses a response the proxy cannot read through.
type errEncodedResponse struct{ encoding string }

func (e errEncodedResponse) Error() string {
	return fmt.Sprintf("the upstream answered with Content-Encoding %q, which the proxy cannot check for the injected secret", e.encoding)
}

// scrubResponse replaces rs in resp's headers and body. A body that may
// change length loses its Content-Length (it is sent chunked, or as
// HTTP/2 DATA frames). A response with a Content-Encoding other than
// identity (in any of its values) is refused when a credential was
// injected (the proxy asked for none): its body cannot be checked.
// Trailers are not scrubbed here (their values arrive at the body's end):
// the proxy never passes them on (writeH1, handleH2).
func scrubResponse(resp *http.Response, rs []replacement, injected bool) error {
	if len(rs) == 0 {
		return nil
	}
	if ce, ok := encoded(resp.Header); injected && ok {
		return errEncodedResponse{ce}
	}
	for name, vals := range resp.Header {
		for i, v := range vals {
			vals[i] = replaceAll(v, rs)
		}
		if n := replaceAll(name, rs); n != name {
			delete(resp.Header, name)
			resp.Header[n] = vals
		}
	}
	if resp.Body == nil || resp.Body == http.NoBody || resp.ContentLength == 0 {
		return nil
	}
	resp.Body = newReplaceReader(resp.Body, rs)
	resp.ContentLength = -1
	resp.Header.Del("Content-Length")
	return nil
}

// encoded returns the first coding of h's Content-Encoding values other
// than identity: "identity, gzip" and two headers the same are gzip.
func encoded(h http.Header) (string, bool) {
	for _, v := range h.Values("Content-Encoding") {
		for _, c := range strings.Split(v, ",") {
			if c = strings.TrimSpace(c); c != "" && !strings.EqualFold(c, "identity") {
				return c, true
			}
		}
	}
	return "", false
}

// replaceReader streams r with every rs.old replaced by its new,
// holding back the bytes that could begin one until it knows they do
// not: at most a read's worth plus the longest old string is kept, in
// buffers reused from read to read.
type replaceReader struct {
	r    io.ReadCloser
	rs   []replacement
	keep int    // longest old - 1
	buf  []byte // read, not yet passed on: could begin an old string
	out  []byte // ready, from off on
	off  int
	err  error
}

// replaceRead is the most read from r at once.
const replaceRead = 32 << 10

func newReplaceReader(r io.ReadCloser, rs []replacement) *replaceReader {
	rr := &replaceReader{r: r, rs: rs}
	for _, x := range rs {
		rr.keep = max(rr.keep, len(x.old)-1)
	}
	return rr
}

func (rr *replaceReader) Read(p []byte) (int, error) {
	for rr.off == len(rr.out) && rr.err == nil && len(p) > 2*len(rr.buf) {
		if n, done := rr.readInPlace(p); done && n > 0 {
			return n, nil
		} else if done {
			return 0, rr.err
		}
	}
	for rr.off == len(rr.out) {
		if rr.err != nil {
			return 0, rr.err
		}
		rr.out, rr.off = rr.out[:0], 0
		rr.buf = slices.Grow(rr.buf, replaceRead)
		n, err := rr.r.Read(rr.buf[len(rr.buf) : len(rr.buf)+replaceRead])
		rr.buf = rr.buf[:len(rr.buf)+n]
		rr.flush(err != nil)
		rr.err = err
	}
	n := copy(p, rr.out[rr.off:])
	rr.off += n
	return n, nil
}

// readInPlace reads into p behind the bytes held back, and hands out
// all but the last keep bytes when no old string is among them: the
// common case, with no copy but the held-back bytes. When one is, what
// was read moves to buf for flush; done is false and nothing is handed
// out.
func (rr *replaceReader) readInPlace(p []byte) (n int, done bool) {
	h := copy(p, rr.buf)
	k, err := rr.r.Read(p[h:])
	all := p[:h+k]
	for _, x := range rr.rs {
		if bytes.Contains(all, x.old) {
			rr.out, rr.off = rr.out[:0], 0 // all handed out: off == len(out)
			rr.buf = append(rr.buf[:0], all...)
			rr.flush(err != nil)
			rr.err = err
			return 0, false
		}
	}
	cut := len(all)
	if err == nil {
		cut = max(0, cut-rr.keep)
	}
	rr.buf = append(rr.buf[:0], all[cut:]...)
	rr.err = err
	return cut, cut > 0 || err != nil
}

// flush moves to out what no later byte can change: everything at the
// end, else all but the last keep bytes after the last replacement.
func (rr *replaceReader) flush(final bool) {
	i := 0
	for {
		at, r := -1, replacement{}
		for _, x := range rr.rs {
			if j := bytes.Index(rr.buf[i:], x.old); j >= 0 && (at < 0 || j < at) {
				at, r = j, x
			}
		}
		if at < 0 {
			break
		}
		rr.out = append(rr.out, rr.buf[i:i+at]...)
		rr.out = append(rr.out, r.new...)
		i += at + len(r.old)
	}
	rest := rr.buf[i:]
	cut := len(rest)
	if !final {
		cut = max(0, len(rest)-rr.keep)
	}
	rr.out = append(rr.out, rest[:cut]...)
	rr.buf = rr.buf[:copy(rr.buf, rest[cut:])]
}

func (rr *replaceReader) Close() error { return rr.r.Close() }
