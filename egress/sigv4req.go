package egress

import (
	"net/http"
	"net/url"
	"slices"
	"strings"
)

// The proxy must send exactly what it signs: a request whose signed form
// differs from what the upstream reads fails with SignatureDoesNotMatch,
// and S3's answer to that quotes the canonical request it computed (the
// real key id, the session token header): an error the child could cause
// on purpose to read them. So the query and, for S3, the path are
// checked or rewritten here, before signing, into the one form the signer,
// the wire and AWS agree on.

// checkSigV4Query refuses a query the signer would not sign as AWS reads
// it. aws-sdk-go-v2's signer signs and sends url.ParseQuery's pairs,
// re-encoded and sorted by their decoded names; AWS sorts the encoded
// names. Refused: a query ParseQuery rejects (a ";", a bad escape) or
// would drop (an empty pair), a raw "+" (a space to Go, a "+" to some
// servers), a raw byte outside visible ASCII, and parameters the two
// orders would sort differently.
func checkSigV4Query(raw string) error {
	if raw == "" {
		return nil
	}
	for _, c := range []byte(raw) {
		if c <= ' ' || c >= 0x7f || c == '+' {
			return sigV4Refusal("the query of a request the proxy re-signs holds a space, a raw \"+\" or a byte outside visible ASCII; escape it (%%20, %%2B)")
		}
	}
	vals, err := url.ParseQuery(raw)
	if err != nil {
		return sigV4Refusal("the query of a request the proxy re-signs does not parse (%v); the signature would not cover what is sent", err)
	}
	n := 0
	for _, vs := range vals {
		n += len(vs)
	}
	if n != strings.Count(raw, "&")+1 {
		return sigV4Refusal("the query of a request the proxy re-signs has an empty parameter (\"&&\", or a trailing \"&\")")
	}
	if goCanonicalQuery(vals) != awsCanonicalQuery(vals) {
		return sigV4Refusal("the query's parameters would be signed in another order than AWS reads them; the proxy does not re-sign it")
	}
	return nil
}

// goCanonicalQuery is the canonical query aws-sdk-go-v2's signer built up
// to v1.42 (pairs sorted before they are escaped). Since v1.48 it sorts
// escaped pairs as AWS does; a query on which the two orders differ is
// still refused, whichever signer the proxy is built with.
func goCanonicalQuery(vals url.Values) string {
	c := url.Values{}
	for k, vs := range vals {
		c[k] = slices.Sorted(slices.Values(vs))
	}
	return strings.ReplaceAll(c.Encode(), "+", "%20")
}

// awsCanonicalQuery is the canonical query AWS computes: every name and
// value escaped, pairs sorted by escaped name, then escaped value.
func awsCanonicalQuery(vals url.Values) string {
	var pairs []string
	for k, vs := range vals {
		for _, v := range vs {
			pairs = append(pairs, awsEscape(k)+"="+awsEscape(v))
		}
	}
	slices.SortFunc(pairs, func(a, b string) int {
		ak, av, _ := strings.Cut(a, "=")
		bk, bv, _ := strings.Cut(b, "=")
		if c := strings.Compare(ak, bk); c != 0 {
			return c
		}
		return strings.Compare(av, bv)
	})
	return strings.Join(pairs, "&")
}

// awsEscape escapes every byte but the unreserved ones, upper-case hex.
func awsEscape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if unreserved(s[i]) {
			b.WriteByte(s[i])
		} else {
			writeEscape(&b, s[i])
		}
	}
	return b.String()
}

// s3Path is canonPath's path as S3 signs it: S3 decodes the path it
// receives and escapes every byte but the unreserved ones and "/", so
// the characters canonPath keeps raw (!$&'()*+,;=:@) are sent, and
// signed, escaped. Escapes canonPath kept (upper-case) stay as they are.
func s3Path(p string) string {
	var b strings.Builder
	b.Grow(len(p))
	for i := 0; i < len(p); i++ {
		switch c := p[i]; {
		case c == '%' && i+2 < len(p):
			b.WriteString(p[i : i+3])
			i += 2
		case unreserved(c) || c == '/':
			b.WriteByte(c)
		default:
			writeEscape(&b, c)
		}
	}
	return b.String()
}

// checkCopySource confines S3's copy to an injection's path prefix:
// every header the child sends is signed, so PUT /bucket-a/x with
// x-amz-copy-source: /other-bucket/secret would copy from outside the
// prefix with the real key. With a prefix, x-amz-copy-source (one, as
// "[/]bucket/key[?versionId=…]", URL-encoded) must name an object under
// it, read as a path-style "/bucket/key" (or, on a virtual-hosted
// endpoint BUCKET.s3…, against "/BUCKET" + the prefix), and the
// x-amz-copy-source-* headers come only with it. An access point ARN, or
// a source canonPath refuses, is refused.
func checkCopySource(h http.Header, in Injection) error {
	if in.PathPrefix == "" || in.PathPrefix == "/" {
		return nil
	}
	var src []string
	others := false
	for name, vs := range h {
		switch l := strings.ToLower(name); {
		case l == "x-amz-copy-source":
			src = append(src, vs...)
		case strings.HasPrefix(l, "x-amz-copy-source"):
			others = true
		case strings.HasPrefix(l, "x-amz-") && strings.Contains(l, "-source"):
			// Another header naming a source (S3 Express RenameObject's
			// x-amz-rename-source): not one the proxy can confine.
			return sigV4Refusal("header %.64s names a source, which the proxy checks only in x-amz-copy-source, against %s", name, in.PathPrefix)
		}
	}
	switch {
	case len(src) == 0 && others:
		return sigV4Refusal("an x-amz-copy-source-* header without x-amz-copy-source, under a key confined to %s", in.PathPrefix)
	case len(src) == 0:
		return nil
	case len(src) > 1:
		return sigV4Refusal("several x-amz-copy-source headers, under a key confined to %s", in.PathPrefix)
	}
	p, _, _ := strings.Cut(src[0], "?")
	if !strings.HasPrefix(p, "/") {
		p = "/" + p
	}
	canon, err := canonPath(p)
	if err != nil || strings.HasPrefix(src[0], "arn:") {
		return sigV4Refusal("x-amz-copy-source %q is not a bucket/key the proxy can check against %s", src[0], in.PathPrefix)
	}
	prefix := in.PathPrefix
	if bucket, ok := virtualHostBucket(in.Host); ok {
		prefix = "/" + bucket + prefix
	}
	if !pathHasPrefix(canon, prefix) {
		return sigV4Refusal("x-amz-copy-source %s is outside %s, the only objects the key is injected for", canon, prefix)
	}
	return nil
}

// virtualHostBucket is the bucket of a virtual-hosted S3 endpoint
// (BUCKET.s3.REGION.amazonaws.com, BUCKET.s3-REGION…, BUCKET.s3.…).
func virtualHostBucket(host string) (string, bool) {
	for _, sep := range []string{".s3.", ".s3-"} {
		if i := strings.Index(host, sep); i > 0 {
			return host[:i], true
		}
	}
	return "", false
}
