package standin

import (
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"
)

// The example of AWS's "Signature Calculations for the Authorization
// Header" (S3, GET Object and GET Bucket), which botocore reproduces.
const (
	docAccessKey = "AKIAIOSFODNN7EXAMPLE"
	docSecret    = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
	docDate      = "20130524T000000Z"
	emptySHA256  = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
	docGetObject = "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request," +
		"SignedHeaders=host;range;x-amz-content-sha256;x-amz-date," +
		"Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41"
	docListBucket = "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, " +
		"SignedHeaders=host;x-amz-content-sha256;x-amz-date, " +
		"Signature=34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7"
)

var docTime = time.Date(2013, 5, 24, 0, 5, 0, 0, time.UTC)

var sigV4AuthCases = []struct {
	name, header string
	ok           bool
}{
	{"aws example", docGetObject, true},
	{"spaces after commas", docListBucket, true},
	{"components reordered", "AWS4-HMAC-SHA256 Signature=" + strings.Repeat("a", 64) + ",SignedHeaders=host;x-amz-date,Credential=K/20240101/r/s3/aws4_request", true},
	{"empty", "", false},
	{"other algorithm", strings.Replace(docGetObject, "AWS4-HMAC-SHA256", "AWS4-HMAC-SHA1", 1), false},
	{"sigv2", "AWS AKIAIOSFODNN7EXAMPLE:frJIUN8DYpKDtOLCwo//yllqDzg=", false},
	{"algorithm only", "AWS4-HMAC-SHA256 ", false},
	{"lower-case algorithm", strings.ToLower(docGetObject[:16]) + docGetObject[16:], false},
	{"repeated credential", docGetObject + ",Credential=EVIL/20130524/us-east-1/s3/aws4_request", false},
	{"missing signature", strings.Split(docGetObject, ",Signature")[0], false},
	{"trailing comma", docGetObject + ",", false},
	{"unknown component", docGetObject + ",Extra=1", false},
	{"credential with four fields", strings.Replace(docGetObject, "/s3/aws4_request", "/aws4_request", 1), false},
	{"credential with six fields", strings.Replace(docGetObject, "AKIAIOSFODNN7EXAMPLE/", "A/B/", 1), false},
	{"empty access key", strings.Replace(docGetObject, "AKIAIOSFODNN7EXAMPLE", "", 1), false},
	{"bad scope terminator", strings.Replace(docGetObject, "aws4_request", "aws5_request", 1), false},
	{"bad date", strings.Replace(docGetObject, "20130524", "2013-5-24", 1), false},
	{"signed headers unsorted", strings.Replace(docGetObject, "host;range", "range;host", 1), false},
	{"signed headers repeated", strings.Replace(docGetObject, "host;range", "host;host;range", 1), false},
	{"host not signed", strings.Replace(docGetObject, "host;range;", "range;", 1), false},
	{"date not signed", strings.Replace(docGetObject, ";x-amz-date", "", 1), false},
	{"upper-case header name", strings.Replace(docGetObject, "range", "Range", 1), false},
	{"empty header name", strings.Replace(docGetObject, "host;range", "host;;range", 1), false},
	{"header name with colon", strings.Replace(docGetObject, "range", "ra:nge", 1), false},
	{"short signature", docGetObject[:len(docGetObject)-1], false},
	{"long signature", docGetObject + "0", false},
	{"upper-case signature", strings.Replace(docGetObject, "f0e8bdb8", "F0E8BDB8", 1), false},
	{"non-hex signature", strings.Replace(docGetObject, "f0e8bdb8", "g0e8bdb8", 1), false},
	{"NUL in access key", strings.Replace(docGetObject, "AKIA", "AK\x00A", 1), true}, // parsed; no key matches it
	{"no equals", "AWS4-HMAC-SHA256 Credential", false},
}

func TestParseSigV4Auth(t *testing.T) {
	for _, tc := range sigV4AuthCases {
		t.Run(tc.name, func(t *testing.T) {
			a, err := parseSigV4Auth(tc.header)
			if (err == nil) != tc.ok {
				t.Fatalf("err = %v, want ok=%v", err, tc.ok)
			}
			if tc.name == "aws example" {
				want := sigV4Auth{AccessKey: docAccessKey, Date: "20130524", Region: "us-east-1", Service: "s3",
					Signed:    []string{"host", "range", "x-amz-content-sha256", "x-amz-date"},
					Signature: "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41"}
				if a.AccessKey != want.AccessKey || a.scope() != want.scope() || !slices.Equal(a.Signed, want.Signed) || a.Signature != want.Signature {
					t.Fatalf("parsed %+v, want %+v", a, want)
				}
			}
		})
	}
}

func FuzzParseSigV4Auth(f *testing.F) {
	for _, tc := range sigV4AuthCases {
		f.Add(tc.header)
	}
	f.Fuzz(func(t *testing.T, h string) {
		a, err := parseSigV4Auth(h)
		if err != nil {
			return
		}
		if a.AccessKey == "" || a.Region == "" || a.Service == "" || len(a.Signature) != 64 {
			t.Fatalf("accepted %q with empty fields: %+v", h, a)
		}
		if !slices.IsSorted(a.Signed) || !slices.Contains(a.Signed, "host") || !slices.Contains(a.Signed, "x-amz-date") {
			t.Fatalf("accepted %q with signed headers %q", h, a.Signed)
		}
	})
}

// docRequest is one of AWS's examples, signed with docSecret.
func docRequest(t testing.TB, target, auth string, extra ...string) *http.Request {
	t.Helper()
	r, err := http.NewRequest(http.MethodGet, "https://examplebucket.s3.amazonaws.com"+target, nil)
	if err != nil {
		t.Fatal(err)
	}
	r.Header.Set("Authorization", auth)
	r.Header.Set("X-Amz-Date", docDate)
	r.Header.Set("X-Amz-Content-Sha256", emptySHA256)
	for i := 0; i+1 < len(extra); i += 2 {
		r.Header.Set(extra[i], extra[i+1])
	}
	return r
}

func TestVerifySigV4(t *testing.T) {
	getObject := func(t *testing.T) *http.Request {
		return docRequest(t, "/test.txt", docGetObject, "Range", "bytes=0-9")
	}
	listBucket := func(t *testing.T) *http.Request { return docRequest(t, "/?max-keys=2&prefix=J", docListBucket) }
	for _, tc := range []struct {
		name   string
		req    func(*testing.T) *http.Request
		secret string
		body   string // hex SHA-256 of the body
		now    time.Time
		ok     bool
	}{
		{"get object", getObject, docSecret, emptySHA256, docTime, true},
		{"list bucket", listBucket, docSecret, emptySHA256, docTime, true},
		{"query reordered", func(t *testing.T) *http.Request {
			return docRequest(t, "/?prefix=J&max-keys=2", docListBucket)
		}, docSecret, emptySHA256, docTime, true},
		{"unsigned payload", func(t *testing.T) *http.Request {
			r := getObject(t)
			r.Header.Set("X-Amz-Content-Sha256", "UNSIGNED-PAYLOAD")
			return r
		}, docSecret, emptySHA256, docTime, false}, // the example signed the hash, so the signature differs
		{"wrong secret", getObject, docSecret + "x", emptySHA256, docTime, false},
		{"empty secret", getObject, "", emptySHA256, docTime, false},
		{"other path", func(t *testing.T) *http.Request {
			return docRequest(t, "/test.txu", docGetObject, "Range", "bytes=0-9")
		}, docSecret, emptySHA256, docTime, false},
		{"encoded path", func(t *testing.T) *http.Request {
			return docRequest(t, "/test%2Etxt", docGetObject, "Range", "bytes=0-9")
		}, docSecret, emptySHA256, docTime, true}, // "." needs no escape: the same canonical path
		{"other query", func(t *testing.T) *http.Request {
			return docRequest(t, "/?max-keys=3&prefix=J", docListBucket)
		}, docSecret, emptySHA256, docTime, false},
		{"extra query parameter", func(t *testing.T) *http.Request {
			return docRequest(t, "/?max-keys=2&prefix=J&delimiter=/", docListBucket)
		}, docSecret, emptySHA256, docTime, false},
		{"signed header changed", func(t *testing.T) *http.Request {
			return docRequest(t, "/test.txt", docGetObject, "Range", "bytes=0-99")
		}, docSecret, emptySHA256, docTime, false},
		{"signed header missing", func(t *testing.T) *http.Request {
			return docRequest(t, "/test.txt", docGetObject)
		}, docSecret, emptySHA256, docTime, false},
		{"other host", func(t *testing.T) *http.Request {
			r := getObject(t)
			r.Host = "evil.s3.amazonaws.com"
			return r
		}, docSecret, emptySHA256, docTime, false},
		{"body differs from its hash", getObject, docSecret, strings.Repeat("0", 64), docTime, false},
		{"too late", getObject, docSecret, emptySHA256, docTime.Add(20 * time.Minute), false},
		{"too early", getObject, docSecret, emptySHA256, docTime.Add(-25 * time.Minute), false},
		{"date and scope differ", func(t *testing.T) *http.Request {
			r := getObject(t)
			r.Header.Set("X-Amz-Date", "20130525T000000Z")
			return r
		}, docSecret, emptySHA256, docTime.Add(24 * time.Hour), false},
		{"malformed date", func(t *testing.T) *http.Request {
			r := getObject(t)
			r.Header.Set("X-Amz-Date", "Fri, 24 May 2013 00:00:00 GMT")
			return r
		}, docSecret, emptySHA256, docTime, false},
		{"no authorization", func(t *testing.T) *http.Request {
			r := getObject(t)
			r.Header.Del("Authorization")
			return r
		}, docSecret, emptySHA256, docTime, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, err := verifySigV4(tc.req(t), tc.secret, tc.body, tc.now)
			if (err == nil) != tc.ok {
				t.Fatalf("err = %v, want ok=%v", err, tc.ok)
			}
			if err != nil && strings.Contains(err.Error(), docSecret) {
				t.Fatalf("the error shows the secret: %v", err)
			}
			if tc.ok && a.AccessKey != docAccessKey {
				t.Fatalf("access key %q", a.AccessKey)
			}
		})
	}
}

func TestCanonicalQuery(t *testing.T) {
	for raw, want := range map[string]string{
		"":                                  "",
		"b=2&a=1":                           "a=1&b=2",
		"a=2&a=1":                           "a=1&a=2",
		"a-b=1&a=2":                         "a=2&a-b=1", // sorted by name, not by "name=value"
		"list-type=2&prefix=&delimiter=%2F": "delimiter=%2F&list-type=2&prefix=",
		"prefix=c%20d%2B~%2A":               "prefix=c%20d%2B~%2A",
		"prefix=a+b":                        "prefix=a%20b",
		"flag":                              "flag=",
		"bad=%zz":                           "bad=%25zz",
	} {
		if got := canonicalQuery(raw); got != want {
			t.Errorf("canonicalQuery(%q) = %q, want %q", raw, got, want)
		}
	}
}

func FuzzVerifySigV4(f *testing.F) {
	f.Add("/test.txt", docGetObject, "bytes=0-9", docDate)
	f.Add("/?max-keys=2&prefix=J", docListBucket, "", docDate)
	for _, tc := range sigV4AuthCases {
		f.Add("/?a=%zz&&=&b", tc.header, "", docDate)
	}
	f.Fuzz(func(t *testing.T, target, auth, rng, date string) {
		r, err := http.NewRequest(http.MethodGet, "https://examplebucket.s3.amazonaws.com"+target, nil)
		if err != nil || !strings.HasPrefix(target, "/") {
			return
		}
		r.Header.Set("Authorization", auth)
		r.Header.Set("X-Amz-Date", date)
		r.Header.Set("X-Amz-Content-Sha256", emptySHA256)
		r.Header.Set("Range", rng)
		if _, err := verifySigV4(r, docSecret, emptySHA256, docTime); err != nil {
			return
		}
		// Accepted: flipping the last hex digit of the signature must not be.
		last := auth[len(auth)-1]
		flip := byte('0')
		if last == '0' {
			flip = '1'
		}
		r.Header.Set("Authorization", auth[:len(auth)-1]+string(flip))
		if _, err := verifySigV4(r, docSecret, emptySHA256, docTime); err == nil {
			t.Fatalf("a changed signature verified: %q", auth)
		}
	})
}

// AWS's example of a request to a service other than S3 (IAM ListUsers,
// from "Create a canonical request for Signature Version 4"): no
// X-Amz-Content-Sha256 header, the body's hash signed.
func TestVerifySigV4WithoutPayloadHeader(t *testing.T) {
	const (
		secret = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"
		auth   = "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/iam/aws4_request, " +
			"SignedHeaders=content-type;host;x-amz-date, Signature=5d672d79c15b13162d9279b0855cfba6789a8edb4c82c400e06b5924a6f2b5d7"
	)
	at := time.Date(2015, 8, 30, 12, 40, 0, 0, time.UTC)
	req := func() *http.Request {
		r, err := http.NewRequest(http.MethodGet, "https://iam.amazonaws.com/?Action=ListUsers&Version=2010-05-08", nil)
		if err != nil {
			t.Fatal(err)
		}
		r.Header.Set("Authorization", auth)
		r.Header.Set("X-Amz-Date", "20150830T123600Z")
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded; charset=utf-8")
		return r
	}
	if a, err := verifySigV4(req(), secret, emptySHA256, at); err != nil || a.Service != "iam" {
		t.Fatalf("the example: %v", err)
	}
	if _, err := verifySigV4(req(), secret, strings.Repeat("0", 64), at); err == nil {
		t.Fatal("another body verified")
	}
	r := req()
	r.Header.Set("X-Amz-Content-Sha256", strings.Repeat("0", 64))
	if _, err := verifySigV4(r, secret, emptySHA256, at); err == nil {
		t.Fatal("a payload header that does not match the body verified")
	}
}
