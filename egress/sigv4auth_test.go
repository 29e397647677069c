package egress

import (
	"strings"
	"testing"
)

const goodSigV4 = "AWS4-HMAC-SHA256 Credential=coily-placeholder-0123/20261129/us-east-1/s3/aws4_request, " +
	"SignedHeaders=host;x-amz-content-sha256;x-amz-date, Signature=" + "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

func TestParseSigV4Auth(t *testing.T) {
	a, err := parseSigV4Auth(goodSigV4)
	if err != nil || a.AccessKey != "coily-placeholder-0123" || a.Date != "20261129" || a.Region != "us-east-1" || a.Service != "s3" ||
		strings.Join(a.Signed, ";") != "host;x-amz-content-sha256;x-amz-date" {
		t.Fatalf("%+v %v", a, err)
	}
	// Components in another order and without spaces are read the same.
	reordered := "AWS4-HMAC-SHA256 Signature=" + a.Signature + ",SignedHeaders=host,Credential=AKIA/20261129/eu-west-1/sts/aws4_request"
	if b, err := parseSigV4Auth(reordered); err != nil || b.AccessKey != "AKIA" || b.Service != "sts" {
		t.Fatalf("%+v %v", b, err)
	}
	sig := a.Signature
	for _, bad := range []string{
		"",
		"AWS4-HMAC-SHA256",
		"AWS4-HMAC-SHA256 ",
		"aws4-hmac-sha256 Credential=A/20261129/r/s/aws4_request, SignedHeaders=host, Signature=" + sig,
		"AWS4-ECDSA-P256-SHA256 Credential=A/20261129/r/s/aws4_request, SignedHeaders=host, Signature=" + sig,
		"AWS4-HMAC-SHA256  Credential=A/20261129/r/s/aws4_request, SignedHeaders=host, Signature=" + sig,
		"AWS4-HMAC-SHA256 Credential=A/20261129/r/s/aws4_request, SignedHeaders=host",
		"AWS4-HMAC-SHA256 Credential=A/20261129/r/s/aws4_request, Credential=B/20261129/r/s/aws4_request, SignedHeaders=host, Signature=" + sig,
		"AWS4-HMAC-SHA256 Credential=A/20261129/r/s/aws4_request, SignedHeaders=host, Signature=" + sig + ", Extra=1",
		"AWS4-HMAC-SHA256 Credential=A/20261129/r/s/aws4_request, SignedHeaders=host, Signature=" + strings.ToUpper(sig),
		"AWS4-HMAC-SHA256 Credential=A/20261129/r/s/aws4_request, SignedHeaders=host, Signature=" + sig[:63],
		"AWS4-HMAC-SHA256 Credential=A/20261129/r/s/aws4_request, SignedHeaders=host, Signature=" + sig + "0",
		"AWS4-HMAC-SHA256 Credential=A/20261129/r/s/aws4_request/x, SignedHeaders=host, Signature=" + sig,
		"AWS4-HMAC-SHA256 Credential=A/20261129/r/s/aws5_request, SignedHeaders=host, Signature=" + sig,
		"AWS4-HMAC-SHA256 Credential=/20261129/r/s/aws4_request, SignedHeaders=host, Signature=" + sig,
		"AWS4-HMAC-SHA256 Credential=A B/20261129/r/s/aws4_request, SignedHeaders=host, Signature=" + sig,
		"AWS4-HMAC-SHA256 Credential=A%2F/20261129/r/s/aws4_request, SignedHeaders=host, Signature=" + sig,
		"AWS4-HMAC-SHA256 Credential=A/2026113/r/s/aws4_request, SignedHeaders=host, Signature=" + sig,
		"AWS4-HMAC-SHA256 Credential=A/20261332/r/s/aws4_request, SignedHeaders=host, Signature=" + sig,
		"AWS4-HMAC-SHA256 Credential=A/+2026112/r/s/aws4_request, SignedHeaders=host, Signature=" + sig,
		"AWS4-HMAC-SHA256 Credential=A/20261129/US-EAST-1/s/aws4_request, SignedHeaders=host, Signature=" + sig,
		"AWS4-HMAC-SHA256 Credential=A/20261129/r/s\n/aws4_request, SignedHeaders=host, Signature=" + sig,
		"AWS4-HMAC-SHA256 Credential=A/20261129//s/aws4_request, SignedHeaders=host, Signature=" + sig,
		"AWS4-HMAC-SHA256 Credential=A/20261129/r/s/aws4_request, SignedHeaders=x-amz-date, Signature=" + sig,
		"AWS4-HMAC-SHA256 Credential=A/20261129/r/s/aws4_request, SignedHeaders=x-amz-date;host, Signature=" + sig,
		"AWS4-HMAC-SHA256 Credential=A/20261129/r/s/aws4_request, SignedHeaders=host;host, Signature=" + sig,
		"AWS4-HMAC-SHA256 Credential=A/20261129/r/s/aws4_request, SignedHeaders=Host, Signature=" + sig,
		"AWS4-HMAC-SHA256 Credential=A/20261129/r/s/aws4_request, SignedHeaders=host;, Signature=" + sig,
		"AWS4-HMAC-SHA256 Credential=A/20261129/r/s/aws4_request, SignedHeaders=host;x:y, Signature=" + sig,
		"AWS4-HMAC-SHA256 Credential=A/20261129/r/s/aws4_request,, SignedHeaders=host, Signature=" + sig,
		"AWS4-HMAC-SHA256 Credential=A/20261129/r/s/aws4_request, SignedHeaders=host, Signature=" + sig + strings.Repeat(" ", 5000),
		"AWS4-HMAC-SHA256 Credential=" + strings.Repeat("A", 129) + "/20261129/r/s/aws4_request, SignedHeaders=host, Signature=" + sig,
	} {
		if a, err := parseSigV4Auth(bad); err == nil {
			t.Errorf("parseSigV4Auth(%q) = %+v, want an error", bad, a)
		}
	}
}

func FuzzParseSigV4Auth(f *testing.F) {
	f.Add(goodSigV4)
	f.Add("AWS4-HMAC-SHA256 Signature=" + strings.Repeat("a", 64) + ",SignedHeaders=host,Credential=AKIA/20261129/eu-west-1/sts/aws4_request")
	f.Add("AWS4-HMAC-SHA256 Credential=A/20261129/r/s/aws4_request, SignedHeaders=host;host, Signature=x")
	f.Add("AWS4-HMAC-SHA256 Credential=A/2026113/r/s/aws4_request,, SignedHeaders=Host")
	f.Fuzz(func(t *testing.T, h string) {
		a, err := parseSigV4Auth(h)
		if err != nil {
			return
		}
		// What is accepted is what the signer may be handed: plain tokens.
		if !tokenOf(a.AccessKey, 128, true) || !tokenOf(a.Region, 64, false) || !tokenOf(a.Service, 64, false) ||
			len(a.Date) != 8 || !isLowerHex(a.Signature, 64) || len(a.Signed) == 0 {
			t.Fatalf("parseSigV4Auth(%q) accepted %+v", h, a)
		}
		for _, n := range a.Signed {
			if n == "" || strings.ContainsAny(n, " \t\r\n:;,=") {
				t.Fatalf("signed header %q accepted", n)
			}
		}
	})
}
