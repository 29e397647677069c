package standin

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"hash/crc64"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
)

// sdkS3 is aws-sdk-go-v2's S3 client for s with key and secret, with the
// SDK's default checksums (a trailer on uploads over HTTPS).
func sdkS3(t *testing.T, s *S3Server, key, secret string) *s3.Client {
	t.Helper()
	pem, err := os.ReadFile(s.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(pem)
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}}
	t.Cleanup(hc.CloseIdleConnections)
	return s3.New(s3.Options{
		Region: "eu-west-1", BaseEndpoint: aws.String(s.URL), UsePathStyle: true, HTTPClient: hc, RetryMaxAttempts: 1,
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: key, SecretAccessKey: secret}, nil
		}),
		RequestChecksumCalculation: aws.RequestChecksumCalculationWhenSupported,
	})
}

// The stand-in takes the AWS SDK for Go's default uploads
// (STREAMING-UNSIGNED-PAYLOAD-TRAILER): it verifies the seed signature,
// decodes the aws-chunked body, checks the trailer's checksum (each
// algorithm the SDK offers) and stores the data; a wrong secret is
// refused.
func TestS3SDKTrailerUpload(t *testing.T) {
	s := S3(t, "AKIDSTANDIN", "standin-secret-1", s3Buckets)
	cl := sdkS3(t, s, "AKIDSTANDIN", "standin-secret-1")
	data := bytes.Repeat([]byte("0123456789abcdef"), 5000)
	for _, algo := range []types.ChecksumAlgorithm{"", types.ChecksumAlgorithmCrc32, types.ChecksumAlgorithmCrc32c,
		types.ChecksumAlgorithmCrc64nvme, types.ChecksumAlgorithmSha1, types.ChecksumAlgorithmSha256} {
		key := "k-" + string(algo)
		if _, err := cl.PutObject(context.Background(), &s3.PutObjectInput{Bucket: aws.String("alpha"), Key: aws.String(key),
			Body: bytes.NewReader(data), ChecksumAlgorithm: algo}); err != nil {
			t.Fatalf("PutObject %s: %v\n%q", key, err, s.Requests())
		}
		if got, _ := s.Object("alpha", key); !bytes.Equal(got, data) {
			t.Fatalf("%s: stored %d bytes, want %d", key, len(got), len(data))
		}
		want := "payload=" + streamingUnsignedTrailer + " trailer=x-amz-checksum-" + strings.ToLower(string(algo))
		if algo == "" {
			want += "crc32"
		}
		if reqs := s.Requests(); !strings.HasSuffix(reqs[len(reqs)-1], want) {
			t.Fatalf("%s: %q, want a put %s", key, reqs[len(reqs)-1], want)
		}
	}
	bad := sdkS3(t, s, "AKIDSTANDIN", "another-secret")
	if _, err := bad.PutObject(context.Background(), &s3.PutObjectInput{Bucket: aws.String("alpha"), Key: aws.String("bad"),
		Body: bytes.NewReader(data)}); err == nil || !strings.Contains(err.Error(), "SignatureDoesNotMatch") {
		t.Fatalf("a trailer upload signed with another secret: %v", err)
	}
	if _, ok := s.Object("alpha", "bad"); ok {
		t.Fatal("an upload with a bad seed signature was stored")
	}
}

// trailerOf is the aws-chunked body of data in chunks of size n with
// the trailer "name:value".
func trailerOf(data string, n int, name, value string) string {
	var b strings.Builder
	for len(data) > 0 {
		k := min(n, len(data))
		b.WriteString(strconv.FormatInt(int64(k), 16) + "\r\n" + data[:k] + "\r\n")
		data = data[k:]
	}
	b.WriteString("0\r\n" + name + ":" + value + "\r\n\r\n")
	return b.String()
}

const helloCRC32 = "NhCmhg==" // base64 of the CRC32 (IEEE) of "hello"

var awsChunkedCases = []struct {
	name string
	body string
	ok   bool
}{
	{"one chunk", trailerOf("hello", 64, "x-amz-checksum-crc32", helloCRC32), true},
	{"a chunk per byte", trailerOf("hello", 1, "x-amz-checksum-crc32", helloCRC32), true},
	{"the trailer name in capitals", trailerOf("hello", 2, "X-Amz-Checksum-Crc32", helloCRC32), true},
	{"another checksum", trailerOf("hellO", 64, "x-amz-checksum-crc32", helloCRC32), false},
	{"another trailer", trailerOf("hello", 64, "x-amz-checksum-sha1", helloCRC32), false},
	{"two trailers", strings.TrimSuffix(trailerOf("hello", 64, "x-amz-checksum-crc32", helloCRC32), "\r\n") + "x-amz-meta-a:b\r\n\r\n", false},
	{"no trailer", "5\r\nhello\r\n0\r\n\r\n", false},
	{"no end", strings.TrimSuffix(trailerOf("hello", 64, "x-amz-checksum-crc32", helloCRC32), "\r\n"), false},
	{"more data", "6\r\nhello!\r\n0\r\nx-amz-checksum-crc32:" + helloCRC32 + "\r\n\r\n", false},
	{"a size past the body", "ff\r\nhello\r\n0\r\n", false},
	{"a negative size", "-5\r\nhello\r\n", false},
	{"a size that is no number", "5x\r\nhello\r\n", false},
	{"a chunk without its CRLF", "5\r\nhello0\r\nx-amz-checksum-crc32:" + helloCRC32 + "\r\n\r\n", false},
	{"nothing", "", false},
}

func TestDecodeAWSChunked(t *testing.T) {
	h := http.Header{"Content-Encoding": {"aws-chunked"}, "X-Amz-Decoded-Content-Length": {"5"}, "X-Amz-Trailer": {"x-amz-checksum-crc32"}}
	for _, tc := range awsChunkedCases {
		data, name, err := decodeAWSChunked(h, []byte(tc.body))
		if (err == nil) != tc.ok || tc.ok && (string(data) != "hello" || name != "x-amz-checksum-crc32") {
			t.Errorf("%s: %q %q %v, want ok=%v", tc.name, data, name, err, tc.ok)
		}
	}
	for k, v := range map[string]string{"Content-Encoding": "gzip", "X-Amz-Decoded-Content-Length": "x", "X-Amz-Trailer": "x-amz-meta-a"} {
		bad := h.Clone()
		bad.Set(k, v)
		if _, _, err := decodeAWSChunked(bad, []byte(awsChunkedCases[0].body)); err == nil {
			t.Errorf("%s: %s decoded", k, v)
		}
	}
}

// The CRC-64/NVME check value (of "123456789"), from the CRC catalogue.
func TestCRC64NVME(t *testing.T) {
	if got := crc64.Checksum([]byte("123456789"), crc64.MakeTable(crc64NVME)); got != 0xae8b14860a799888 {
		t.Fatalf("CRC-64/NVME of 123456789 = %#x", got)
	}
}

// FuzzDecodeAWSChunked: what decodes is data with the trailer's
// checksum, and re-encoding it decodes to the same.
func FuzzDecodeAWSChunked(f *testing.F) {
	for _, tc := range awsChunkedCases {
		f.Add([]byte(tc.body), int64(5))
	}
	f.Fuzz(func(t *testing.T, body []byte, n int64) {
		h := http.Header{"Content-Encoding": {"aws-chunked"}, "X-Amz-Decoded-Content-Length": {strconv.FormatInt(n, 10)},
			"X-Amz-Trailer": {"x-amz-checksum-crc32"}}
		data, _, err := decodeAWSChunked(h, body)
		if err != nil {
			return
		}
		if int64(len(data)) != n {
			t.Fatalf("decoded %d bytes, the header says %d", len(data), n)
		}
		sum := trailerChecksums["x-amz-checksum-crc32"]()
		sum.Write(data)
		again, _, err := decodeAWSChunked(h, []byte(trailerOf(string(data), 3, "x-amz-checksum-crc32", base64.StdEncoding.EncodeToString(sum.Sum(nil)))))
		if err != nil || !bytes.Equal(again, data) {
			t.Fatalf("re-encoded %q: %q %v", data, again, err)
		}
	})
}
