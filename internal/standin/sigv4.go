package standin

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"
)

// sigV4Algorithm is the only signing algorithm the S3 stand-in accepts.
const sigV4Algorithm = "AWS4-HMAC-SHA256"

// sigV4Skew is how far a request's X-Amz-Date may be from now (S3's own
// limit).
const sigV4Skew = 15 * time.Minute

// sigV4Auth is a parsed Authorization header of a SigV4-signed request:
// "AWS4-HMAC-SHA256 Credential=AKID/DATE/REGION/SERVICE/aws4_request,
// SignedHeaders=h1;h2, Signature=HEX".
type sigV4Auth struct {
	AccessKey string
	Date      string // YYYYMMDD
	Region    string
	Service   string
	Signed    []string // lower-case header names, sorted, host among them
	Signature string   // 64 lower-case hex digits
}

// scope is the credential scope: DATE/REGION/SERVICE/aws4_request.
func (a sigV4Auth) scope() string {
	return a.Date + "/" + a.Region + "/" + a.Service + "/aws4_request"
}

// parseSigV4Auth parses an Authorization header. It refuses anything but
// exactly one Credential, SignedHeaders and Signature, in any order.
func parseSigV4Auth(h string) (sigV4Auth, error) {
	var a sigV4Auth
	rest, ok := strings.CutPrefix(h, sigV4Algorithm+" ")
	if !ok {
		return a, errors.New("not " + sigV4Algorithm)
	}
	seen := map[string]bool{}
	for _, part := range strings.Split(rest, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok || seen[k] {
			return a, errors.New("malformed or repeated component")
		}
		seen[k] = true
		var err error
		switch k {
		case "Credential":
			err = a.parseCredential(v)
		case "SignedHeaders":
			err = a.parseSignedHeaders(v)
		case "Signature":
			if len(v) != 64 || strings.ToLower(v) != v {
				return a, errors.New("signature is not 64 lower-case hex digits")
			}
			if _, err = hex.DecodeString(v); err != nil {
				return a, errors.New("signature is not hex")
			}
			a.Signature = v
		default:
			err = errors.New("unknown component")
		}
		if err != nil {
			return a, err
		}
	}
	if len(seen) != 3 {
		return a, errors.New("missing component")
	}
	return a, nil
}

func (a *sigV4Auth) parseCredential(v string) error {
	f := strings.Split(v, "/")
	if len(f) != 5 || f[4] != "aws4_request" {
		return errors.New("credential is not AKID/DATE/REGION/SERVICE/aws4_request")
	}
	for _, s := range f[:4] {
		if s == "" {
			return errors.New("empty credential field")
		}
	}
	if _, err := time.Parse("20060102", f[1]); err != nil {
		return errors.New("credential date is not YYYYMMDD")
	}
	a.AccessKey, a.Date, a.Region, a.Service = f[0], f[1], f[2], f[3]
	return nil
}

func (a *sigV4Auth) parseSignedHeaders(v string) error {
	names := strings.Split(v, ";")
	for _, n := range names {
		if n == "" || strings.ToLower(n) != n || strings.ContainsAny(n, " \t:") {
			return errors.New("malformed signed header name")
		}
	}
	if !slices.IsSorted(names) || len(slices.Compact(slices.Clone(names))) != len(names) {
		return errors.New("signed headers not sorted and unique")
	}
	if !slices.Contains(names, "host") || !slices.Contains(names, "x-amz-date") {
		return errors.New("host or x-amz-date not signed")
	}
	a.Signed = names
	return nil
}

// verifySigV4 checks r's SigV4 signature (header form) against secret
// and returns the parsed header. bodyHash is the hex SHA-256 of the body
// read so far, which X-Amz-Content-Sha256 must equal unless it is
// UNSIGNED-PAYLOAD or STREAMING-UNSIGNED-PAYLOAD-TRAILER (the body, and
// its trailer, unsigned: decodeAWSChunked checks its checksum); without
// that header (services but S3), the body's hash is what was signed.
func verifySigV4(r *http.Request, secret, bodyHash string, now time.Time) (sigV4Auth, error) {
	a, err := parseSigV4Auth(r.Header.Get("Authorization"))
	if err != nil {
		return a, fmt.Errorf("authorization header: %w", err)
	}
	amzDate := r.Header.Get("X-Amz-Date")
	at, err := time.Parse("20060102T150405Z", amzDate)
	if err != nil {
		return a, errors.New("x-amz-date is not YYYYMMDDTHHMMSSZ")
	}
	if at.Format("20060102") != a.Date {
		return a, errors.New("x-amz-date and credential date differ")
	}
	if d := now.Sub(at); d > sigV4Skew || d < -sigV4Skew {
		return a, errors.New("request time too skewed")
	}
	// S3 sends the payload's hash (or UNSIGNED-PAYLOAD) in a header; the
	// other services (STS) sign the body's hash without one.
	payload := r.Header.Get("X-Amz-Content-Sha256")
	switch {
	case payload == "":
		payload = bodyHash
	case payload != "UNSIGNED-PAYLOAD" && payload != streamingUnsignedTrailer && payload != bodyHash:
		return a, errors.New("x-amz-content-sha256 does not match the body")
	}
	_, toSign := signedStrings(r, a, payload)
	key := hmacSHA256([]byte("AWS4"+secret), a.Date)
	for _, s := range []string{a.Region, a.Service, "aws4_request"} {
		key = hmacSHA256(key, s)
	}
	want := hex.EncodeToString(hmacSHA256(key, toSign))
	if !hmac.Equal([]byte(want), []byte(a.Signature)) {
		return a, errors.New("signature does not match")
	}
	return a, nil
}

// signedStrings are the canonical request and the string to sign of r
// as S3 computes them (payload: X-Amz-Content-Sha256, or the body's hash
// without it): what S3's SignatureDoesNotMatch quotes.
func signedStrings(r *http.Request, a sigV4Auth, payload string) (canon, toSign string) {
	canon = canonicalRequest(r, a.Signed, payload)
	sum := sha256.Sum256([]byte(canon))
	return canon, sigV4Algorithm + "\n" + r.Header.Get("X-Amz-Date") + "\n" + a.scope() + "\n" + hex.EncodeToString(sum[:])
}

// canonicalRequest builds SigV4's canonical request for r as S3 does (the
// path encoded once, not normalised).
func canonicalRequest(r *http.Request, signed []string, payload string) string {
	var b strings.Builder
	b.WriteString(r.Method + "\n")
	b.WriteString(awsEscape(r.URL.Path, true) + "\n")
	b.WriteString(canonicalQuery(r.URL.RawQuery) + "\n")
	for _, name := range signed {
		b.WriteString(name + ":" + canonicalHeader(r, name) + "\n")
	}
	b.WriteString("\n" + strings.Join(signed, ";") + "\n" + payload)
	return b.String()
}

func canonicalHeader(r *http.Request, name string) string {
	vals := r.Header.Values(name)
	if name == "host" {
		vals = []string{r.Host}
	}
	out := make([]string, len(vals))
	for i, v := range vals {
		out[i] = strings.Join(strings.Fields(v), " ")
	}
	return strings.Join(out, ",")
}

// canonicalQuery re-encodes raw as SigV4 wants: every name and value
// escaped, pairs sorted by name, then value. A component that does not decode is kept as
// sent (its signature will then not match).
func canonicalQuery(raw string) string {
	if raw == "" {
		return ""
	}
	var pairs [][2]string
	for _, kv := range strings.Split(raw, "&") {
		k, v, _ := strings.Cut(kv, "=")
		if dk, err := url.QueryUnescape(k); err == nil {
			k = dk
		}
		if dv, err := url.QueryUnescape(v); err == nil {
			v = dv
		}
		pairs = append(pairs, [2]string{awsEscape(k, false), awsEscape(v, false)})
	}
	slices.SortFunc(pairs, func(x, y [2]string) int {
		if c := strings.Compare(x[0], y[0]); c != 0 {
			return c
		}
		return strings.Compare(x[1], y[1])
	})
	out := make([]string, len(pairs))
	for i, p := range pairs {
		out[i] = p[0] + "=" + p[1]
	}
	return strings.Join(out, "&")
}

// awsEscape percent-encodes every byte but A-Z a-z 0-9 - _ . ~ (and /
// when keepSlash), upper-case hex.
func awsEscape(s string, keepSlash bool) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'A' && c <= 'Z', c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '-', c == '_', c == '.', c == '~':
			b.WriteByte(c)
		case c == '/' && keepSlash:
			b.WriteByte(c)
		default:
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

func hmacSHA256(key []byte, data string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(data))
	return m.Sum(nil)
}
