package standin

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
)

// S3's refusals quote the request's credentials as real S3's do:
// SignatureDoesNotMatch the key id and the canonical request with the
// session token header (in text and hex bytes), InvalidAccessKeyId the
// key id, InvalidToken and ExpiredToken the token (Token-0). DisagreeOn
// refuses a request whose signature verifies in the same way.
func TestS3ErrorsEchoCredentials(t *testing.T) {
	keys := NewAWSKeys()
	keys.Add("AKIDCALLER", "caller-secret")
	id, secret, token := keys.Issue("AKIDCALLER", "arn:aws:iam::123456789012:role/r", time.Hour)
	oldID, oldSecret, oldToken := keys.Issue("AKIDCALLER", "arn:aws:iam::123456789012:role/r", -time.Minute)
	s := S3WithKeys(t, keys, map[string][]string{"alpha": {"a.txt"}, "quirk": nil})
	s.DisagreeOn("/quirk/")
	pem, err := os.ReadFile(s.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	get := func(path string, creds aws.Credentials) (int, string) {
		r, err := http.NewRequest(http.MethodGet, s.URL+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		r.Header.Set("X-Amz-Content-Sha256", emptySHA256)
		if err := v4.NewSigner().SignHTTP(context.Background(), creds, r, emptySHA256, "s3", "us-east-1", time.Now(),
			func(o *v4.SignerOptions) { o.DisableURIPathEscaping = true }); err != nil {
			t.Fatal(err)
		}
		resp, err := c.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	hexToken := hexBytes("x-amz-security-token:" + token)
	for _, tc := range []struct {
		name, path string
		creds      aws.Credentials
		want       []string
	}{
		{"a wrong secret", "/alpha/a.txt", aws.Credentials{AccessKeyID: id, SecretAccessKey: "wrong", SessionToken: token},
			[]string{"<Code>SignatureDoesNotMatch</Code>", "<AWSAccessKeyId>" + id + "</AWSAccessKeyId>",
				"x-amz-security-token:" + token, hexToken, "<StringToSign>AWS4-HMAC-SHA256", "<CanonicalRequest>GET&#xA;/alpha/a.txt"}},
		{"a path the stand-in disagrees on", "/quirk/x", aws.Credentials{AccessKeyID: id, SecretAccessKey: secret, SessionToken: token},
			[]string{"<Code>SignatureDoesNotMatch</Code>", "<AWSAccessKeyId>" + id + "</AWSAccessKeyId>", "x-amz-security-token:" + token}},
		{"an unknown key", "/", aws.Credentials{AccessKeyID: "AKIDNOBODY", SecretAccessKey: "x"},
			[]string{"<Code>InvalidAccessKeyId</Code>", "<AWSAccessKeyId>AKIDNOBODY</AWSAccessKeyId>"}},
		{"another key's token", "/", aws.Credentials{AccessKeyID: id, SecretAccessKey: secret, SessionToken: oldToken},
			[]string{"<Code>InvalidToken</Code>", "<Token-0>" + oldToken + "</Token-0>"}},
		{"an expired key", "/", aws.Credentials{AccessKeyID: oldID, SecretAccessKey: oldSecret, SessionToken: oldToken},
			[]string{"<Code>ExpiredToken</Code>", "<Token-0>" + oldToken + "</Token-0>"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body := get(tc.path, tc.creds)
			if code != http.StatusForbidden {
				t.Fatalf("%d %s, want 403", code, body)
			}
			for _, w := range tc.want {
				if !strings.Contains(body, w) {
					t.Errorf("the body lacks %q:\n%s", w, body)
				}
			}
			if strings.Contains(body, secret) || strings.Contains(body, oldSecret) {
				t.Errorf("the body holds a secret key:\n%s", body)
			}
		})
	}
	if code, body := get("/alpha/a.txt", aws.Credentials{AccessKeyID: id, SecretAccessKey: secret, SessionToken: token}); code != http.StatusNotFound {
		t.Errorf("a good request: %d %s, want 404 NoSuchKey", code, body)
	}
}
