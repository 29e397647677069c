package egress

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"

	"coily.dev/coily/internal/standin"
)

const (
	s3Host  = "s3.example.test"
	stsHost = "sts.example.test"
)

// sigv4Env is a proxy that inspects the S3 and STS stand-ins and
// re-signs requests signed with the placeholders of a temporary key.
type sigv4Env struct {
	tp                  *testProxy
	s3                  *standin.S3Server
	sts                 *standin.STSServer
	ca                  *Authority
	keyPH, secPH, tokPH string
	id, secret, token   string
	stsKeyPH, stsSecPH  string // STS's injection: a long-term key (STS refuses temporary ones)
}

func newSigV4Env(t *testing.T, maxBody int64) *sigv4Env {
	t.Helper()
	return newSigV4EnvPrefix(t, maxBody, "")
}

// newSigV4EnvPrefix is newSigV4Env with the S3 key injected only under
// prefix.
func newSigV4EnvPrefix(t *testing.T, maxBody int64, prefix string) *sigv4Env {
	t.Helper()
	keys := standin.NewAWSKeys()
	keys.Add("AKIDLONGTERM", "long-term-secret")
	e := &sigv4Env{keyPH: NewPlaceholder(), secPH: NewPlaceholder(), tokPH: NewPlaceholder(), stsKeyPH: NewPlaceholder(), stsSecPH: NewPlaceholder()}
	e.id, e.secret, e.token = keys.Issue("AKIDLONGTERM", "arn:aws:iam::123456789012:role/r", time.Hour)
	e.s3 = standin.S3WithKeys(t, keys, map[string][]string{"alpha": {"a.txt"}, "beta": {"secret.txt"}}, s3Host)
	e.sts = standin.STS(t, keys, stsHost)
	ca, err := NewAuthority([]string{s3Host, stsHost}, time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	e.ca = ca
	pem, err := os.ReadFile(e.s3.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	roots := caPool(ca)
	roots.AppendCertsFromPEM(pem)
	if pem, err = os.ReadFile(e.sts.CAFile); err != nil {
		t.Fatal(err)
	}
	roots.AppendCertsFromPEM(pem)
	key := &AWSKey{AccessKeyID: e.id, SessionToken: e.token, SecretPlaceholder: e.secPH, TokenPlaceholder: e.tokPH}
	ins := []Injection{
		{Placeholder: e.keyPH, Secret: e.secret, Host: s3Host, Port: atoi(t, e.s3.Port), PathPrefix: prefix, Form: FormSigV4, AWS: key},
		{Placeholder: e.stsKeyPH, Secret: "long-term-secret", Host: stsHost, Port: atoi(t, e.sts.Port), Form: FormSigV4,
			AWS: &AWSKey{AccessKeyID: "AKIDLONGTERM", SecretPlaceholder: e.stsSecPH}},
	}
	insp := &Inspection{CA: ca, Roots: roots, MaxBody: maxBody, Inject: ins}
	res := newResolver(s3Host, "127.0.0.1", stsHost, "127.0.0.1")
	e.tp = startProxy(t, Config{Resolver: res, Inspect: insp}, []string{s3Host + ":" + e.s3.Port, stsHost + ":" + e.sts.Port}, loopback)
	return e
}

func (e *sigv4Env) client(t *testing.T, h2 bool) *http.Client {
	if h2 {
		return e.tp.client(t, h2Only(caPool(e.ca)))
	}
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: caPool(e.ca)}}
	tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
	return e.tp.client(t, tr)
}

// childReq is a request the child signs with its placeholders (as the
// AWS CLI does): payload is X-Amz-Content-Sha256 ("": none, the body's
// hash is signed, as for STS).
func (e *sigv4Env) childReq(t *testing.T, method, url, body, payload, service string) *http.Request {
	t.Helper()
	var rd io.Reader = http.NoBody
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	hash := payload
	if payload != "" {
		req.Header.Set("X-Amz-Content-Sha256", payload)
	} else {
		hash = sha256Hex(body)
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded; charset=utf-8")
	}
	creds := aws.Credentials{AccessKeyID: e.keyPH, SecretAccessKey: e.secPH, SessionToken: e.tokPH}
	if service == "sts" || service == "iam" { // the key injected on the STS host
		creds = aws.Credentials{AccessKeyID: e.stsKeyPH, SecretAccessKey: e.stsSecPH}
	}
	if err := v4.NewSigner().SignHTTP(context.Background(), creds, req, hash, service, "us-east-1", time.Now(),
		func(o *v4.SignerOptions) { o.DisableURIPathEscaping = service == "s3" }); err != nil {
		t.Fatal(err)
	}
	return req
}

func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

func send(t *testing.T, c *http.Client, req *http.Request) (int, string) {
	t.Helper()
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// The child signs with placeholders; the upstreams (which verify every
// signature) get the request re-signed with the real temporary key and
// its session token: a GET with the empty body's hash, a PUT
// UNSIGNED-PAYLOAD and one with its body's hash, and an STS POST whose
// body the proxy hashes itself; over HTTP/1.1 and HTTP/2.
func TestSigV4Resigns(t *testing.T) {
	e := newSigV4Env(t, 0)
	for _, h2 := range []bool{false, true} {
		c := e.client(t, h2)
		s3 := "https://" + s3Host + ":" + e.s3.Port
		if code, body := send(t, c, e.childReq(t, "GET", s3+"/", "", emptySHA256, "s3")); code != 200 || !strings.Contains(body, "<Name>alpha</Name>") {
			t.Fatalf("ListBuckets: %d %s", code, body)
		}
		if code, body := send(t, c, e.childReq(t, "PUT", s3+"/alpha/u.txt", "unsigned body", unsignedPayload, "s3")); code != 200 {
			t.Fatalf("PUT UNSIGNED-PAYLOAD: %d %s", code, body)
		}
		if got, _ := e.s3.Object("alpha", "u.txt"); string(got) != "unsigned body" {
			t.Fatalf("stored %q", got)
		}
		if code, body := send(t, c, e.childReq(t, "PUT", s3+"/alpha/h.txt", "hashed body", sha256Hex("hashed body"), "s3")); code != 200 {
			t.Fatalf("PUT with its hash: %d %s", code, body)
		}
		sts := "https://" + stsHost + ":" + e.sts.Port
		if code, body := send(t, c, e.childReq(t, "POST", sts+"/", "Action=GetCallerIdentity&Version=2011-06-15", "", "sts")); code != 200 || !strings.Contains(body, "GetCallerIdentityResult") {
			t.Fatalf("STS GetCallerIdentity: %d %s", code, body)
		}
	}
	for _, k := range e.s3.AccessKeys() {
		if k != e.id {
			t.Errorf("S3 served a request signed with %q, want the real key", k)
		}
	}
	for _, l := range e.s3.Requests() {
		if strings.HasPrefix(l, "4") || strings.HasPrefix(l, "5") {
			t.Errorf("S3 refused %q", l)
		}
	}
	var reqs []RequestRow
	waitFor(t, "8 request rows", func() bool { reqs, _ = e.tp.Requests(); return len(reqs) >= 8 })
	if len(reqs) != 8 {
		t.Fatalf("%d request rows, want 8", len(reqs))
	}
	for _, r := range reqs {
		if !r.Injected || r.Decision != Allow || r.Status != 200 {
			t.Errorf("row %+v: want allow, 200, injected", r)
		}
	}
}

// Requests the proxy will not re-sign are refused before anything goes
// upstream, each with its reason.
func TestSigV4Refuses(t *testing.T) {
	e := newSigV4Env(t, 64)
	c := e.client(t, false)
	s3 := "https://" + s3Host + ":" + e.s3.Port
	n := 0
	streaming := func() *http.Request {
		return e.childReq(t, "PUT", s3+"/alpha/s.txt", "10;chunk-signature=abc\r\n", "STREAMING-AWS4-HMAC-SHA256-PAYLOAD", "s3")
	}
	otherToken := func() *http.Request {
		r := e.childReq(t, "GET", s3+"/", "", emptySHA256, "s3")
		r.Header.Set("X-Amz-Security-Token", e.token+"x")
		return r
	}
	noToken := func() *http.Request {
		r := e.childReq(t, "GET", s3+"/", "", emptySHA256, "s3")
		r.Header.Del("X-Amz-Security-Token")
		return r
	}
	badAuth := func() *http.Request {
		r := e.childReq(t, "GET", s3+"/", "", emptySHA256, "s3")
		r.Header.Set("Authorization", strings.Replace(r.Header.Get("Authorization"), "SignedHeaders=", "SignedHeaders=zz;", 1))
		return r
	}
	otherKey := func() *http.Request {
		r := e.childReq(t, "GET", s3+"/", "", emptySHA256, "s3")
		r.Header.Set("Authorization", strings.Replace(r.Header.Get("Authorization"), e.keyPH, "AKIDOTHER", 1)+" "+e.keyPH)
		return r
	}
	secretSent := func() *http.Request {
		r := e.childReq(t, "PUT", s3+"/alpha/x.txt", "my secret is "+e.secPH, unsignedPayload, "s3")
		return r
	}
	presigned := func() *http.Request {
		r, _ := http.NewRequest("GET", s3+"/alpha/a.txt?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential="+e.keyPH+"%2F20261129%2Fus-east-1%2Fs3%2Faws4_request&X-Amz-Signature=00", nil)
		return r
	}
	stsURL := "https://" + stsHost + ":" + e.sts.Port + "/"
	for _, tc := range []struct {
		name   string
		req    func() *http.Request
		reason string
		says   string
	}{
		{"chunk-signed body", streaming, reasonSigV4, "keep the AWS key in the command's environment"},
		{"another session token", otherToken, reasonSigV4, "X-Amz-Security-Token must be the session token placeholder"},
		{"no session token", noToken, reasonSigV4, "X-Amz-Security-Token must be the session token placeholder"},
		{"an unreadable Authorization", badAuth, reasonSigV4, "not one the proxy re-signs"},
		{"the placeholder beside another key", otherKey, reasonSigV4, "not one the proxy re-signs"},
		{"the secret placeholder in a body", secretSent, reasonPlaceholder, "in the body"},
		{"a presigned URL", presigned, reasonPlaceholder, "in the URL"},
		{"the S3 key to another host", func() *http.Request {
			return e.childReq(t, "POST", "https://"+stsHost+":"+e.sts.Port+"/", "Action=GetCallerIdentity&Version=2011-06-15", "", "s3")
		}, reasonPlaceholder, "in header Authorization to " + stsHost},
		{"a hash the body does not have", func() *http.Request {
			return e.childReq(t, "PUT", s3+"/alpha/m.txt", "a body", sha256Hex("another body"), "s3")
		}, reasonSigV4, "does not hash to its X-Amz-Content-Sha256"},
		{"a hash without a body", func() *http.Request {
			return e.childReq(t, "PUT", s3+"/alpha/m.txt", "", sha256Hex("another body"), "s3")
		}, reasonSigV4, "names a body, but the request has none"},
		{"a body over max_body to hash", func() *http.Request {
			return e.childReq(t, "POST", "https://"+stsHost+":"+e.sts.Port+"/", "Action=GetCallerIdentity&Version=2011-06-15&"+strings.Repeat("x", 64), "", "sts")
		}, reasonBodyCap, "over the rule's cap"},
		// Credential vending: a re-signed call that answers a new key
		// would hand the child credentials it holds in the open.
		{"STS GetFederationToken", func() *http.Request {
			return e.childReq(t, "POST", stsURL, "Action=GetFederationToken&Name=p&Version=2011-06-15", "", "sts")
		}, reasonSigV4, "does not re-sign STS \"GetFederationToken\""},
		{"STS AssumeRole in the query", func() *http.Request {
			return e.childReq(t, "GET", stsURL+"?Action=AssumeRole&RoleArn=arn", "", "", "sts")
		}, reasonSigV4, "does not re-sign STS \"AssumeRole\""},
		{"STS two actions", func() *http.Request {
			return e.childReq(t, "POST", stsURL+"?Action=GetSessionToken", "Action=GetCallerIdentity", "", "sts")
		}, reasonSigV4, "must name one Action, not 2"},
		{"STS with a payload hash", func() *http.Request {
			return e.childReq(t, "POST", stsURL, "Action=GetSessionToken", sha256Hex("Action=GetSessionToken"), "sts")
		}, reasonSigV4, "must name no X-Amz-Content-Sha256"},
		{"UNSIGNED-PAYLOAD to STS", func() *http.Request {
			return e.childReq(t, "POST", stsURL, "Action=GetCallerIdentity", unsignedPayload, "sts")
		}, reasonSigV4, "UNSIGNED-PAYLOAD is S3's"},
		{"IAM", func() *http.Request {
			return e.childReq(t, "POST", stsURL, "Action=CreateAccessKey", "", "iam")
		}, reasonSigV4, "does not re-sign requests to AWS iam"},
		{"S3 CreateSession", func() *http.Request {
			return e.childReq(t, "GET", s3+"/alpha?session", "", emptySHA256, "s3")
		}, reasonSigV4, "CreateSession"},
		{"an upper-case hash", func() *http.Request {
			return e.childReq(t, "PUT", s3+"/alpha/m.txt", "a body", strings.ToUpper(sha256Hex("a body")), "s3")
		}, reasonSigV4, "neither a SHA-256"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := len(e.s3.Requests()) + len(e.sts.Calls())
			code, body := send(t, c, tc.req())
			if code != http.StatusForbidden || !strings.Contains(body, tc.says) {
				t.Fatalf("%d %q, want 403 saying %q", code, body, tc.says)
			}
			var reqs []RequestRow
			waitFor(t, "the request's row", func() bool { reqs, _ = e.tp.Requests(); return len(reqs) > n })
			n++
			if last := reqs[len(reqs)-1]; last.Reason != tc.reason || last.Injected {
				t.Errorf("row %+v, want reason %s", last, tc.reason)
			}
			if after := len(e.s3.Requests()) + len(e.sts.Calls()); after != before {
				t.Errorf("the upstream saw the refused request: %q", e.s3.Requests()[before:])
			}
		})
	}
	if _, ok := e.s3.Object("alpha", "m.txt"); ok {
		t.Error("a body with a wrong hash was stored")
	}
}

func TestHashCheck(t *testing.T) {
	body := strings.Repeat("0123456789", 1000)
	for _, r := range []func(io.Reader) io.Reader{
		func(r io.Reader) io.Reader { return r }, iotest.OneByteReader, iotest.HalfReader, iotest.DataErrReader,
	} {
		c := newHashCheck(io.NopCloser(r(strings.NewReader(body))), sha256Hex(body))
		got, err := io.ReadAll(c)
		if err != nil || string(got) != body {
			t.Fatalf("a matching body: %d bytes, %v", len(got), err)
		}
		c = newHashCheck(io.NopCloser(r(strings.NewReader(body))), sha256Hex(body+"x"))
		got, err = io.ReadAll(c)
		if !errors.Is(err, errPayloadHash) || !c.bad || len(got) >= len(body) || !bytes.HasPrefix([]byte(body), got) {
			t.Fatalf("a body that does not match: %d of %d bytes passed, %v", len(got), len(body), err)
		}
	}
}
