package egress

import (
	"bytes"
	"context"
	"encoding/hex"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
)

// recordingClient is an HTTP client that keeps every response body the
// child (the AWS SDK) receives.
type recordingClient struct {
	c      *http.Client
	mu     sync.Mutex
	bodies []string
}

func (rc *recordingClient) Do(r *http.Request) (*http.Response, error) {
	resp, err := rc.c.Do(r)
	if err != nil {
		return nil, err
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	rc.mu.Lock()
	rc.bodies = append(rc.bodies, string(b))
	rc.mu.Unlock()
	resp.Body = io.NopCloser(bytes.NewReader(b))
	return resp, err
}

func (rc *recordingClient) all() string {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return strings.Join(rc.bodies, "\n")
}

// sdkClient is aws-sdk-go-v2's own S3 client as the child holds it: the
// placeholders for credentials, the SDK's default checksums (a trailer on
// every upload over HTTPS), through the proxy.
func (e *sigv4Env) sdkClient(rc *recordingClient) *s3.Client {
	creds := aws.Credentials{AccessKeyID: e.keyPH, SecretAccessKey: e.secPH, SessionToken: e.tokPH, Source: "placeholders"}
	return s3.New(s3.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String("https://" + s3Host + ":" + e.s3.Port),
		UsePathStyle: true,
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return creds, nil
		}),
		HTTPClient:                 rc,
		RequestChecksumCalculation: aws.RequestChecksumCalculationWhenSupported,
		ResponseChecksumValidation: aws.ResponseChecksumValidationWhenSupported,
		RetryMaxAttempts:           1,
	})
}

// The AWS SDK for Go's S3 client, holding placeholders, uploads with its
// default integrity checksums (STREAMING-UNSIGNED-PAYLOAD-TRAILER, the
// body aws-chunked with the checksum in a trailer) through the proxy,
// which re-signs the headers with the real key: PutObject succeeds with
// each checksum algorithm, and a multipart upload's UploadParts, over
// HTTP/1.1 and HTTP/2, S3 (which verifies
// the seed signature and the trailer's checksum) stores the bytes sent,
// and reads them back. S3's echo of a signature it refuses comes back
// with the placeholders in place of the real key id and token, and no
// placeholder ever reaches S3.
func TestSigV4StreamingTrailerSDK(t *testing.T) {
	e := newSigV4Env(t, 0)
	e.s3.DisagreeOn("/beta/echo")
	ctx := context.Background()
	data := bytes.Repeat([]byte("through the proxy, with a trailer\n"), 3000) // ~100 KiB
	puts := 0
	for _, h2 := range []bool{false, true} {
		rc := &recordingClient{c: e.client(t, h2)}
		cl := e.sdkClient(rc)
		for _, algo := range []types.ChecksumAlgorithm{"", types.ChecksumAlgorithmCrc32c, types.ChecksumAlgorithmCrc64nvme, types.ChecksumAlgorithmSha256} {
			key := "sdk-" + strings.ToLower(string(algo)) + ".txt"
			_, err := cl.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("alpha"), Key: aws.String(key),
				Body: bytes.NewReader(data), ChecksumAlgorithm: algo})
			if err != nil {
				t.Fatalf("h2=%v PutObject %s: %v\nS3: %q", h2, key, err, e.s3.Requests())
			}
			puts++
			if got, ok := e.s3.Object("alpha", key); !ok || !bytes.Equal(got, data) {
				t.Fatalf("S3 stored %d bytes under %s, want the %d sent", len(got), key, len(data))
			}
			out, err := cl.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("alpha"), Key: aws.String(key)})
			if err != nil {
				t.Fatalf("GetObject %s: %v", key, err)
			}
			got, _ := io.ReadAll(out.Body)
			out.Body.Close()
			if !bytes.Equal(got, data) {
				t.Fatalf("GetObject %s: %d bytes", key, len(got))
			}
		}
		// An empty body goes with its checksum in a header, not a trailer.
		if _, err := cl.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("alpha"), Key: aws.String("empty"), Body: bytes.NewReader(nil)}); err != nil {
			t.Fatalf("PutObject of nothing: %v", err)
		}
		if got, ok := e.s3.Object("alpha", "empty"); !ok || len(got) != 0 {
			t.Fatalf("S3 stored %q, %v for nothing", got, ok)
		}
		multipartUpload(t, cl, "alpha", "multi.txt", data)
		if got, _ := e.s3.Object("alpha", "multi.txt"); !bytes.Equal(got, append(append([]byte(nil), data...), data[:100]...)) {
			t.Fatalf("the multipart upload stored %d bytes", len(got))
		}
		_, err := cl.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("beta"), Key: aws.String("echo/x"), Body: strings.NewReader("echo")})
		if err == nil || !strings.Contains(err.Error(), "SignatureDoesNotMatch") {
			t.Fatalf("a put S3 refuses: %v", err)
		}
		seen := rc.all()
		if !strings.Contains(seen, "<CanonicalRequest>PUT") || !strings.Contains(seen, e.keyPH) || !strings.Contains(seen, e.tokPH) {
			t.Fatalf("the child did not get S3's echo with the placeholders:\n%s", seen)
		}
		for name, s := range map[string]string{"key id": e.id, "secret": e.secret, "token": e.token, "token as hex bytes": hexSpaced(e.token[:16])} {
			if strings.Contains(seen, s) || strings.Contains(err.Error(), s) {
				t.Errorf("the child received the real %s", name)
			}
		}
	}
	var trailers int
	for _, l := range e.s3.Requests() {
		if (strings.Contains(l, "PutObject") || strings.Contains(l, "UploadPart")) && strings.Contains(l, "payload="+streamingUnsignedTrailer+" trailer=x-amz-checksum-") {
			trailers++
		}
	}
	puts += 4 // each multipart upload's two parts
	if trailers != puts {
		t.Errorf("%d of %d puts reached S3 as %s: %q", trailers, puts, streamingUnsignedTrailer, e.s3.Requests())
	}
	for _, ph := range []string{e.keyPH, e.secPH, e.tokPH} {
		if e.s3.Received(ph) {
			t.Errorf("a placeholder reached S3")
		}
	}
	for _, k := range e.s3.AccessKeys() {
		if k != e.id {
			t.Errorf("S3 served a request signed with %q, want the real key", k)
		}
	}
}

// multipartUpload uploads data and its first 100 bytes as the two parts
// of key, with the SDK's default checksums.
func multipartUpload(t *testing.T, cl *s3.Client, bucket, key string, data []byte) {
	t.Helper()
	ctx := context.Background()
	up, err := cl.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String(bucket), Key: aws.String(key)})
	if err != nil {
		t.Fatalf("CreateMultipartUpload: %v", err)
	}
	var parts []types.CompletedPart
	for i, p := range [][]byte{data, data[:100]} {
		n := aws.Int32(int32(i + 1))
		out, err := cl.UploadPart(ctx, &s3.UploadPartInput{Bucket: aws.String(bucket), Key: aws.String(key), UploadId: up.UploadId,
			PartNumber: n, Body: bytes.NewReader(p)})
		if err != nil {
			t.Fatalf("UploadPart %d: %v", i+1, err)
		}
		parts = append(parts, types.CompletedPart{PartNumber: n, ETag: out.ETag})
	}
	if _, err := cl.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{Bucket: aws.String(bucket), Key: aws.String(key),
		UploadId: up.UploadId, MultipartUpload: &types.CompletedMultipartUpload{Parts: parts}}); err != nil {
		t.Fatalf("CompleteMultipartUpload: %v", err)
	}
}

// hexSpaced is s as S3's *Bytes fields write it: "41 53 49 41 …".
func hexSpaced(s string) string {
	parts := make([]string, len(s))
	for i := range len(s) {
		parts[i] = hex.EncodeToString([]byte{s[i]})
	}
	return strings.Join(parts, " ")
}

// trailerReq is a STREAMING-UNSIGNED-PAYLOAD-TRAILER PUT the child signs
// with its placeholders, with the SDK's headers; edit changes it after
// (the proxy re-signs whatever headers the child sends).
func (e *sigv4Env) trailerReq(t *testing.T, path, body string, decoded int, edit func(*http.Request)) *http.Request {
	t.Helper()
	r := e.childReq(t, "PUT", "https://"+s3Host+":"+e.s3.Port+path, body, streamingUnsignedTrailer, "s3")
	for k, v := range trailerHeaders(decoded) {
		r.Header[k] = v
	}
	if edit != nil {
		edit(r)
	}
	return r
}

// crc32Hello is the CRC32 of "hello", as its trailer carries it.
const crc32Hello = "NhCmhg=="

// What the proxy passes on of a STREAMING-UNSIGNED-PAYLOAD-TRAILER
// request is only what S3 would read as the announced framing: headers
// that frame the body otherwise, the signed streaming forms, the form to
// another service, and bodies whose framing or trailer is anything else
// (a second trailer line smuggling a header, a trailer that is not the
// announced checksum, chunks longer or shorter than the decoded length)
// are refused with a sentence; S3 stores none of them.
func TestSigV4StreamingTrailerRefuses(t *testing.T) {
	e := newSigV4Env(t, 0)
	c := e.client(t, false)
	good := "5\r\nhello\r\n0\r\nx-amz-checksum-crc32:" + crc32Hello + "\r\n\r\n"
	if code, body := send(t, c, e.trailerReq(t, "/alpha/good.txt", good, 5, nil)); code != 200 {
		t.Fatalf("a well-formed trailer upload: %d %s\nS3: %q", code, body, e.s3.Requests())
	}
	if got, _ := e.s3.Object("alpha", "good.txt"); string(got) != "hello" {
		t.Fatalf("S3 stored %q", got)
	}
	// HTTP's own trailer (after a chunked body) is not the aws-chunked
	// one: the proxy passes none on, so it cannot add a header either.
	r := e.trailerReq(t, "/alpha/http-trailer.txt", good, 5, nil)
	r.ContentLength, r.TransferEncoding = -1, []string{"chunked"}
	r.Body = io.NopCloser(strings.NewReader(good))
	r.Trailer = http.Header{"X-Amz-Checksum-Crc32": {"AAAAAA=="}, "X-Amz-Copy-Source": {"/beta/smuggled-by-trailer"}}
	if code, body := send(t, c, r); code != 200 {
		t.Fatalf("an upload with an HTTP trailer: %d %s\nS3: %q", code, body, e.s3.Requests())
	}
	if got, _ := e.s3.Object("alpha", "http-trailer.txt"); string(got) != "hello" || e.s3.Received("smuggled-by-trailer") {
		t.Fatalf("S3 stored %q; it received the HTTP trailer: %v", got, e.s3.Received("smuggled-by-trailer"))
	}
	n := 2
	for _, tc := range []struct {
		name     string
		req      func() *http.Request
		upstream bool // the request's head went upstream before its body was cut
		reason   string
		says     string
	}{
		{"a second trailer line smuggling a header", func() *http.Request {
			return e.trailerReq(t, "/alpha/m.txt", "5\r\nhello\r\n0\r\nx-amz-checksum-crc32:"+crc32Hello+"\r\nx-amz-copy-source:/beta/secret.txt\r\n\r\n", 5, nil)
		}, true, reasonSigV4, "is not the aws-chunked body with one x-amz-checksum-crc32 trailer"},
		{"another header as the trailer", func() *http.Request {
			return e.trailerReq(t, "/alpha/m.txt", "5\r\nhello\r\n0\r\nx-amz-acl:public-read\r\n\r\n", 5, nil)
		}, true, reasonSigV4, "is not the aws-chunked body"},
		{"more data than announced", func() *http.Request {
			return e.trailerReq(t, "/alpha/m.txt", "6\r\nhello!\r\n0\r\nx-amz-checksum-crc32:"+crc32Hello+"\r\n\r\n", 5, nil)
		}, true, reasonSigV4, "is not the aws-chunked body"},
		{"a chunk signature", func() *http.Request {
			return e.trailerReq(t, "/alpha/m.txt", "5;chunk-signature="+strings.Repeat("0", 64)+"\r\nhello\r\n0\r\nx-amz-checksum-crc32:"+crc32Hello+"\r\n\r\n", 5, nil)
		}, true, reasonSigV4, "is not the aws-chunked body"},
		{"the secret placeholder in a chunk", func() *http.Request {
			d := "key " + e.secPH
			return e.trailerReq(t, "/alpha/m.txt", strconv.FormatInt(int64(len(d)), 16)+"\r\n"+d+"\r\n0\r\nx-amz-checksum-crc32:"+crc32Hello+"\r\n\r\n", len(d), nil)
		}, true, reasonPlaceholder, "in the body"},
		{"the secret placeholder split across two chunks (S3 joins them)", func() *http.Request {
			d := "key " + e.secPH
			a, b := d[:len(d)/2], d[len(d)/2:]
			return e.trailerReq(t, "/alpha/m.txt", strconv.FormatInt(int64(len(a)), 16)+"\r\n"+a+"\r\n"+
				strconv.FormatInt(int64(len(b)), 16)+"\r\n"+b+"\r\n0\r\nx-amz-checksum-crc32:"+crc32Hello+"\r\n\r\n", len(d), nil)
		}, true, reasonPlaceholder, "split across its aws-chunked framing"},
		{"the token placeholder as the trailer's value", func() *http.Request {
			return e.trailerReq(t, "/alpha/m.txt", "5\r\nhello\r\n0\r\nx-amz-checksum-crc32:"+e.tokPH+"\r\n\r\n", 5, nil)
		}, true, reasonPlaceholder, "in the body"},
		{"a trailer that is no checksum", func() *http.Request {
			return e.trailerReq(t, "/alpha/m.txt", good, 5, func(r *http.Request) { r.Header.Set("X-Amz-Trailer", "x-amz-security-token") })
		}, false, reasonSigV4, "one X-Amz-Trailer naming one checksum header"},
		{"no aws-chunked", func() *http.Request {
			return e.trailerReq(t, "/alpha/m.txt", good, 5, func(r *http.Request) { r.Header.Del("Content-Encoding") })
		}, false, reasonSigV4, "must name aws-chunked"},
		{"no decoded length", func() *http.Request {
			return e.trailerReq(t, "/alpha/m.txt", good, 5, func(r *http.Request) { r.Header.Del("X-Amz-Decoded-Content-Length") })
		}, false, reasonSigV4, "X-Amz-Decoded-Content-Length"},
		{"a trailer with UNSIGNED-PAYLOAD", func() *http.Request {
			return e.trailerReq(t, "/alpha/m.txt", good, 5, func(r *http.Request) { r.Header.Set("X-Amz-Content-Sha256", unsignedPayload) })
		}, false, reasonSigV4, "come only with X-Amz-Content-Sha256: " + streamingUnsignedTrailer},
		{"the signed trailer form", func() *http.Request {
			return e.trailerReq(t, "/alpha/m.txt", good, 5, func(r *http.Request) {
				r.Header.Set("X-Amz-Content-Sha256", "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER")
			})
		}, false, reasonSigV4, "signed chunk by chunk"},
		{"the ECDSA form", func() *http.Request {
			return e.trailerReq(t, "/alpha/m.txt", good, 5, func(r *http.Request) {
				r.Header.Set("X-Amz-Content-Sha256", "STREAMING-AWS4-ECDSA-P256-SHA256-PAYLOAD")
			})
		}, false, reasonSigV4, "signed chunk by chunk"},
		{"no body", func() *http.Request {
			return e.trailerReq(t, "/alpha/m.txt", "", 0, nil)
		}, false, reasonSigV4, "has no body"},
		{"to STS", func() *http.Request {
			r := e.childReq(t, "POST", "https://"+stsHost+":"+e.sts.Port+"/", good, streamingUnsignedTrailer, "sts")
			for k, v := range trailerHeaders(5) {
				r.Header[k] = v
			}
			return r
		}, false, reasonSigV4, streamingUnsignedTrailer + " is S3's"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := len(e.s3.Requests()) + len(e.sts.Calls())
			code, body := send(t, c, tc.req())
			if code != http.StatusForbidden || !strings.Contains(body, tc.says) || !strings.Contains(body, "coily:") {
				t.Fatalf("%d %q, want the proxy's 403 saying %q", code, body, tc.says)
			}
			var reqs []RequestRow
			waitFor(t, "the request's row", func() bool { reqs, _ = e.tp.Requests(); return len(reqs) > n })
			n++
			if last := reqs[len(reqs)-1]; last.Reason != tc.reason || last.Injected {
				t.Errorf("row %+v, want reason %s", last, tc.reason)
			}
			if !tc.upstream {
				if after := len(e.s3.Requests()) + len(e.sts.Calls()); after != before {
					t.Errorf("the upstream saw the refused request: %q", e.s3.Requests()[before:])
				}
			}
		})
	}
	if _, ok := e.s3.Object("alpha", "m.txt"); ok {
		t.Error("S3 stored a refused upload")
	}
	for _, l := range e.s3.Requests() {
		if strings.Contains(l, "m.txt") && !strings.HasPrefix(l, "4") {
			t.Errorf("S3 served a refused upload: %q", l)
		}
	}
	for _, ph := range []string{e.keyPH, e.secPH, e.tokPH} {
		if e.s3.Received(ph) {
			t.Errorf("a placeholder reached S3")
		}
	}
}
