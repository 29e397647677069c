package egress

import (
	"errors"
	"slices"
	"strings"
	"time"
)

// sigV4Algorithm is the one SigV4 algorithm the proxy re-signs.
const sigV4Algorithm = "AWS4-HMAC-SHA256"

// sigV4Auth is a parsed SigV4 Authorization header:
// "AWS4-HMAC-SHA256 Credential=AKID/DATE/REGION/SERVICE/aws4_request,
// SignedHeaders=h1;h2, Signature=HEX". The proxy reads it only to learn
// which key the child named and for which region and service it signed;
// it verifies nothing of the child's signature (made with a placeholder).
type sigV4Auth struct {
	AccessKey string
	Date      string // YYYYMMDD
	Region    string
	Service   string
	Signed    []string // lower-case header names, sorted, unique
	Signature string   // 64 lower-case hex digits
}

// maxSigV4Auth bounds the header parsed.
const maxSigV4Auth = 4096

// parseSigV4Auth reads an Authorization header strictly: the algorithm,
// one space, then exactly one Credential, SignedHeaders and Signature,
// in any order, separated by commas (spaces allowed after them). The key
// id is 1–128 letters, digits, "-" or "_"; region and service 1–64
// lower-case letters, digits or "-"; anything else is refused.
func parseSigV4Auth(h string) (sigV4Auth, error) {
	var a sigV4Auth
	if len(h) > maxSigV4Auth {
		return a, errors.New("longer than 4 KiB")
	}
	rest, ok := strings.CutPrefix(h, sigV4Algorithm+" ")
	if !ok {
		return a, errors.New("not " + sigV4Algorithm)
	}
	seen := map[string]bool{}
	for i, part := range strings.Split(rest, ",") {
		if i > 0 {
			part = strings.TrimLeft(part, " ")
		}
		k, v, ok := strings.Cut(part, "=")
		if !ok || seen[k] {
			return a, errors.New("a malformed or repeated component")
		}
		seen[k] = true
		var err error
		switch k {
		case "Credential":
			err = a.parseCredential(v)
		case "SignedHeaders":
			err = a.parseSignedHeaders(v)
		case "Signature":
			err = a.parseSignature(v)
		default:
			err = errors.New("an unknown component")
		}
		if err != nil {
			return a, err
		}
	}
	if len(seen) != 3 {
		return a, errors.New("a missing component")
	}
	return a, nil
}

func (a *sigV4Auth) parseCredential(v string) error {
	f := strings.Split(v, "/")
	if len(f) != 5 || f[4] != "aws4_request" {
		return errors.New("the credential is not KEY/DATE/REGION/SERVICE/aws4_request")
	}
	if !tokenOf(f[0], 128, true) {
		return errors.New("the credential's key id is not 1-128 letters, digits, - or _")
	}
	if len(f[1]) != 8 || strings.Trim(f[1], "0123456789") != "" {
		return errors.New("the credential's date is not YYYYMMDD")
	}
	if _, err := time.Parse("20060102", f[1]); err != nil {
		return errors.New("the credential's date is not YYYYMMDD")
	}
	if !tokenOf(f[2], 64, false) || !tokenOf(f[3], 64, false) {
		return errors.New("the credential's region or service is not 1-64 lower-case letters, digits or -")
	}
	a.AccessKey, a.Date, a.Region, a.Service = f[0], f[1], f[2], f[3]
	return nil
}

func (a *sigV4Auth) parseSignedHeaders(v string) error {
	names := strings.Split(v, ";")
	for _, n := range names {
		if n == "" || len(n) > 128 || strings.Trim(n, "abcdefghijklmnopqrstuvwxyz0123456789-_.") != "" {
			return errors.New("a malformed signed header name")
		}
	}
	if !slices.IsSorted(names) || len(slices.Compact(slices.Clone(names))) != len(names) {
		return errors.New("the signed headers are not sorted and unique")
	}
	if !slices.Contains(names, "host") {
		return errors.New("host is not signed")
	}
	a.Signed = names
	return nil
}

func (a *sigV4Auth) parseSignature(v string) error {
	if !isLowerHex(v, 64) {
		return errors.New("the signature is not 64 lower-case hex digits")
	}
	a.Signature = v
	return nil
}

// tokenOf reports s being 1 to max bytes of lower-case letters, digits
// and "-" (and, when keyID, upper-case letters and "_").
func tokenOf(s string, max int, keyID bool) bool {
	if s == "" || len(s) > max {
		return false
	}
	for _, c := range []byte(s) {
		ok := 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' ||
			keyID && ('A' <= c && c <= 'Z' || c == '_')
		if !ok {
			return false
		}
	}
	return true
}

// isLowerHex reports s being n lower-case hex digits.
func isLowerHex(s string, n int) bool {
	if len(s) != n {
		return false
	}
	for _, c := range []byte(s) {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}
