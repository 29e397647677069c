package egress

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"testing/iotest"
)

// trailerHeaders are the headers the AWS SDK for Go sends with a
// STREAMING-UNSIGNED-PAYLOAD-TRAILER upload of n bytes.
func trailerHeaders(n int) http.Header {
	return http.Header{
		"Content-Encoding":             {"aws-chunked"},
		"X-Amz-Decoded-Content-Length": {strconv.Itoa(n)},
		"X-Amz-Trailer":                {"x-amz-checksum-crc32"},
	}
}

var awsChunkedHeaderCases = []struct {
	name    string
	payload string
	edit    func(http.Header)
	ok      bool
}{
	{"the SDK's", streamingUnsignedTrailer, func(http.Header) {}, true},
	{"aws-chunked beside the caller's gzip", streamingUnsignedTrailer, func(h http.Header) { h["Content-Encoding"] = []string{"gzip", "aws-chunked"} }, true},
	{"aws-chunked in a list", streamingUnsignedTrailer, func(h http.Header) { h.Set("Content-Encoding", "aws-chunked, gzip") }, true},
	{"sha256 trailer", streamingUnsignedTrailer, func(h http.Header) { h.Set("X-Amz-Trailer", "x-amz-checksum-sha256") }, true},
	{"crc64nvme trailer", streamingUnsignedTrailer, func(h http.Header) { h.Set("X-Amz-Trailer", "x-amz-checksum-crc64nvme") }, true},
	{"an empty upload", streamingUnsignedTrailer, func(h http.Header) { h.Set("X-Amz-Decoded-Content-Length", "0") }, true},
	{"a gzip;q parameter beside a hashed body", sha256Hex("x"), func(h http.Header) {
		h.Set("Content-Encoding", "gzip;q=1")
		h.Del("X-Amz-Trailer")
		h.Del("X-Amz-Decoded-Content-Length")
	}, true},
	{"aws-chunked in capitals", streamingUnsignedTrailer, func(h http.Header) { h.Set("Content-Encoding", "AWS-Chunked") }, true},
	{"a parameter beside aws-chunked", streamingUnsignedTrailer, func(h http.Header) { h.Set("Content-Encoding", "aws-chunked, gzip;q=1") }, false},
	{"no Content-Encoding", streamingUnsignedTrailer, func(h http.Header) { h.Del("Content-Encoding") }, false},
	{"gzip only", streamingUnsignedTrailer, func(h http.Header) { h.Set("Content-Encoding", "gzip") }, false},
	{"aws-chunked twice", streamingUnsignedTrailer, func(h http.Header) { h["Content-Encoding"] = []string{"aws-chunked", "aws-chunked"} }, false},
	{"a coding that is no token", streamingUnsignedTrailer, func(h http.Header) { h.Set("Content-Encoding", "aws-chunked, x:y") }, false},
	{"an empty coding", streamingUnsignedTrailer, func(h http.Header) { h.Set("Content-Encoding", "aws-chunked,,gzip") }, false},
	{"no decoded length", streamingUnsignedTrailer, func(h http.Header) { h.Del("X-Amz-Decoded-Content-Length") }, false},
	{"a negative decoded length", streamingUnsignedTrailer, func(h http.Header) { h.Set("X-Amz-Decoded-Content-Length", "-1") }, false},
	{"a signed decoded length", streamingUnsignedTrailer, func(h http.Header) { h.Set("X-Amz-Decoded-Content-Length", "+5") }, false},
	{"a hex decoded length", streamingUnsignedTrailer, func(h http.Header) { h.Set("X-Amz-Decoded-Content-Length", "0x10") }, false},
	{"a decoded length over int64", streamingUnsignedTrailer, func(h http.Header) { h.Set("X-Amz-Decoded-Content-Length", "9999999999999999999") }, false},
	{"two decoded lengths", streamingUnsignedTrailer, func(h http.Header) { h.Add("X-Amz-Decoded-Content-Length", "5") }, false},
	{"no trailer", streamingUnsignedTrailer, func(h http.Header) { h.Del("X-Amz-Trailer") }, false},
	{"two trailers", streamingUnsignedTrailer, func(h http.Header) { h.Set("X-Amz-Trailer", "x-amz-checksum-crc32,x-amz-checksum-sha1") }, false},
	{"two trailer headers", streamingUnsignedTrailer, func(h http.Header) { h.Add("X-Amz-Trailer", "x-amz-checksum-sha1") }, false},
	{"a trailer that is no checksum", streamingUnsignedTrailer, func(h http.Header) { h.Set("X-Amz-Trailer", "x-amz-security-token") }, false},
	{"a trailer in capitals", streamingUnsignedTrailer, func(h http.Header) { h.Set("X-Amz-Trailer", "X-Amz-Checksum-Crc32") }, false},
	{"a trailer with a space", streamingUnsignedTrailer, func(h http.Header) { h.Set("X-Amz-Trailer", " x-amz-checksum-crc32") }, false},
	{"an unchunked hashed body", sha256Hex("x"), func(h http.Header) {
		h.Del("Content-Encoding")
		h.Del("X-Amz-Trailer")
		h.Del("X-Amz-Decoded-Content-Length")
	}, true},
	{"aws-chunked with UNSIGNED-PAYLOAD", unsignedPayload, func(h http.Header) { h.Del("X-Amz-Trailer"); h.Del("X-Amz-Decoded-Content-Length") }, false},
	{"a trailer with UNSIGNED-PAYLOAD", unsignedPayload, func(h http.Header) { h.Del("Content-Encoding"); h.Del("X-Amz-Decoded-Content-Length") }, false},
	{"a decoded length with a hash", sha256Hex("x"), func(h http.Header) { h.Del("Content-Encoding"); h.Del("X-Amz-Trailer") }, false},
	{"aws-chunked inside another coding's name with UNSIGNED-PAYLOAD (found by fuzzing)", unsignedPayload, func(h http.Header) {
		h.Set("Content-Encoding", "Aws-Chunked0")
		h.Del("X-Amz-Trailer")
		h.Del("X-Amz-Decoded-Content-Length")
	}, false},
	{"a trailer name with a Kelvin sign", streamingUnsignedTrailer, func(h http.Header) { h.Set("X-Amz-Trailer", "x-amz-chec\u212asum-crc32") }, false},
}

func TestCheckAWSChunked(t *testing.T) {
	for _, tc := range awsChunkedHeaderCases {
		h := trailerHeaders(5)
		tc.edit(h)
		c, err := checkAWSChunked(h, tc.payload)
		if (err == nil) != tc.ok {
			t.Errorf("%s: %v, want ok=%v", tc.name, err, tc.ok)
		}
		var se *sigV4Error
		if err != nil && !errors.As(err, &se) {
			t.Errorf("%s: %v is not a refusal with a sentence", tc.name, err)
		}
		if err == nil && tc.payload == streamingUnsignedTrailer && (c == nil || checksumTrailers[c.trailer] == 0) {
			t.Errorf("%s: %+v", tc.name, c)
		}
	}
}

const crc32Of5 = "AAAAAA==" // 8 characters of base64: the parser checks the form, S3 the value

// testNeedle stands for a placeholder in the chunked bodies' cases.
const testNeedle = "PLACEHOLDER-42"

var chunkedBodyCases = []struct {
	name        string
	body        string
	decoded     int64
	ok          bool
	placeholder bool // refused as a placeholder in the decoded data
}{
	{"one chunk", "5\r\nhello\r\n0\r\nx-amz-checksum-crc32:" + crc32Of5 + "\r\n\r\n", 5, true, false},
	{"two chunks, upper-case hex", "3\r\nhel\r\n2\r\nlo\r\n0\r\nx-amz-checksum-crc32:" + crc32Of5 + "\r\n\r\n", 5, true, false},
	{"a long chunk", "A\r\n0123456789\r\n0\r\nx-amz-checksum-crc32:" + crc32Of5 + "\r\n\r\n", 10, true, false},
	{"no data", "0\r\nx-amz-checksum-crc32:" + crc32Of5 + "\r\n\r\n", 0, true, false},
	{"the trailer name in capitals", "5\r\nhello\r\n0\r\nX-Amz-Checksum-CRC32:" + crc32Of5 + "\r\n\r\n", 5, true, false},
	{"leading zeros", "0005\r\nhello\r\n0\r\nx-amz-checksum-crc32:" + crc32Of5 + "\r\n\r\n", 5, true, false},
	{"a second trailer smuggling a header", "5\r\nhello\r\n0\r\nx-amz-checksum-crc32:" + crc32Of5 + "\r\nx-amz-security-token:abc\r\n\r\n", 5, false, false},
	{"another header as the trailer", "5\r\nhello\r\n0\r\nx-amz-meta-a:AAAAAA==\r\n\r\n", 5, false, false},
	{"the trailer twice", "5\r\nhello\r\n0\r\nx-amz-checksum-crc32:" + crc32Of5 + "\r\nx-amz-checksum-crc32:" + crc32Of5 + "\r\n\r\n", 5, false, false},
	{"no trailer", "5\r\nhello\r\n0\r\n\r\n", 5, false, false},
	{"a space after the colon", "5\r\nhello\r\n0\r\nx-amz-checksum-crc32: AAAAAA=\r\n\r\n", 5, false, false},
	{"a value too long", "5\r\nhello\r\n0\r\nx-amz-checksum-crc32:AAAAAAAA\r\n\r\n", 5, false, false},
	{"a value not base64", "5\r\nhello\r\n0\r\nx-amz-checksum-crc32:AAAAAA!=\r\n\r\n", 5, false, false},
	{"a value with a bare LF", "5\r\nhello\r\n0\r\nx-amz-checksum-crc32:AAAA\nA==\r\n\r\n", 5, false, false},
	{"a trailer without colon", "5\r\nhello\r\n0\r\nx-amz-checksum-crc32\r\n\r\n", 5, false, false},
	{"a signed chunk", "5;chunk-signature=" + strings.Repeat("a", 64) + "\r\nhello\r\n0\r\nx-amz-checksum-crc32:" + crc32Of5 + "\r\n\r\n", 5, false, false},
	{"a space after the size", "5 \r\nhello\r\n0\r\nx-amz-checksum-crc32:" + crc32Of5 + "\r\n\r\n", 5, false, false},
	{"a bare LF after the size", "5\nhello\r\n0\r\nx-amz-checksum-crc32:" + crc32Of5 + "\r\n\r\n", 5, false, false},
	{"a chunk longer than its size", "4\r\nhello\r\n0\r\nx-amz-checksum-crc32:" + crc32Of5 + "\r\n\r\n", 5, false, false},
	{"more data than the decoded length", "6\r\nhello!\r\n0\r\nx-amz-checksum-crc32:" + crc32Of5 + "\r\n\r\n", 5, false, false},
	{"less data than the decoded length", "4\r\nhell\r\n0\r\nx-amz-checksum-crc32:" + crc32Of5 + "\r\n\r\n", 5, false, false},
	{"a size over int64", "ffffffffffffffff\r\nhello", 5, false, false},
	{"a size of 17 digits", "00000000000000005\r\nhello\r\n0\r\nx-amz-checksum-crc32:" + crc32Of5 + "\r\n\r\n", 5, false, false},
	{"an empty size", "\r\nhello\r\n0\r\nx-amz-checksum-crc32:" + crc32Of5 + "\r\n\r\n", 5, false, false},
	{"a negative size", "-5\r\nhello\r\n0\r\nx-amz-checksum-crc32:" + crc32Of5 + "\r\n\r\n", 5, false, false},
	{"no end", "5\r\nhello\r\n0\r\nx-amz-checksum-crc32:" + crc32Of5 + "\r\n", 5, false, false},
	{"cut in the data", "5\r\nhel", 5, false, false},
	{"bytes after the end", "5\r\nhello\r\n0\r\nx-amz-checksum-crc32:" + crc32Of5 + "\r\n\r\nGET / HTTP/1.1\r\n\r\n", 5, false, false},
	{"nothing", "", 0, false, false},
	{"a trailer line over 256 bytes", "0\r\nx-amz-checksum-crc32:" + strings.Repeat("A", 300) + "\r\n\r\n", 0, false, false},
	{"a trailer name with a Kelvin sign (Unicode folds it to k)", "5\r\nhello\r\n0\r\nx-amz-chec\u212asum-crc32:" + crc32Of5 + "\r\n\r\n", 5, false, false},
	{"a trailer name with a long s", "5\r\nhello\r\n0\r\nx-amz-check\u017fum-crc32:" + crc32Of5 + "\r\n\r\n", 5, false, false},
	{"the placeholder split across two chunks", "5\r\nPLACE\r\n9\r\nHOLDER-42\r\n0\r\nx-amz-checksum-crc32:" + crc32Of5 + "\r\n\r\n", 14, false, true},
	{"the placeholder across five chunks", "3\r\nPLA\r\n3\r\nCEH\r\n1\r\nO\r\n3\r\nLDE\r\n4\r\nR-42\r\n0\r\nx-amz-checksum-crc32:" + crc32Of5 + "\r\n\r\n", 14, false, true},
	{"the placeholder in one chunk", "e\r\nPLACEHOLDER-42\r\n0\r\nx-amz-checksum-crc32:" + crc32Of5 + "\r\n\r\n", 14, false, true},
	{"most of the placeholder across chunks", "5\r\nPLACE\r\n9\r\nHOLDER-43\r\n0\r\nx-amz-checksum-crc32:" + crc32Of5 + "\r\n\r\n", 14, true, false},
}

func TestChunkedCheck(t *testing.T) {
	for _, tc := range chunkedBodyCases {
		for _, wrap := range []func(io.Reader) io.Reader{
			func(r io.Reader) io.Reader { return r }, iotest.OneByteReader, iotest.HalfReader, iotest.DataErrReader,
		} {
			want := awsChunked{decoded: tc.decoded, trailer: "x-amz-checksum-crc32"}
			c := newChunkedCheck(io.NopCloser(wrap(strings.NewReader(tc.body))), want, [][]byte{[]byte(testNeedle)})
			got, err := io.ReadAll(c)
			if tc.ok {
				if err != nil || string(got) != tc.body || c.bad {
					t.Errorf("%s: %q, %v, want the body passed on whole", tc.name, got, err)
				}
				continue
			}
			if !errors.Is(err, errChunked) && !(tc.placeholder && errors.Is(err, errBodyPlaceholder)) || !c.bad {
				t.Errorf("%s: %v, want errChunked", tc.name, err)
			}
			if len(got) >= len(tc.body) && tc.body != "" || !strings.HasPrefix(tc.body, string(got)) {
				t.Errorf("%s: %q of %q passed on: a refused body must be cut short", tc.name, got, tc.body)
			}
		}
	}
}

// FuzzCheckAWSChunked: headers accepted for the trailer form announce
// one aws-chunked coding among tokens, a decoded length of decimal
// digits, and one known checksum trailer; with any other payload, none of
// them.
func FuzzCheckAWSChunked(f *testing.F) {
	for _, tc := range awsChunkedHeaderCases {
		h := trailerHeaders(5)
		tc.edit(h)
		f.Add(tc.payload == streamingUnsignedTrailer, strings.Join(h["Content-Encoding"], "\n"), strings.Join(h["X-Amz-Decoded-Content-Length"], "\n"), strings.Join(h["X-Amz-Trailer"], "\n"))
	}
	f.Fuzz(func(t *testing.T, trailerForm bool, ce, decoded, trailer string) {
		h := http.Header{}
		for k, v := range map[string]string{"Content-Encoding": ce, "X-Amz-Decoded-Content-Length": decoded, "X-Amz-Trailer": trailer} {
			if v != "" {
				h[k] = strings.Split(v, "\n")
			}
		}
		payload := emptySHA256
		if trailerForm {
			payload = streamingUnsignedTrailer
		}
		c, err := checkAWSChunked(h, payload)
		if err != nil {
			return
		}
		if !trailerForm {
			if c != nil || strings.Contains(strings.ToLower(ce), "aws-chunked") || decoded != "" || trailer != "" {
				t.Fatalf("accepted %q %q %q without the trailer form", ce, decoded, trailer)
			}
			return
		}
		n, perr := strconv.ParseInt(decoded, 10, 64)
		if c == nil || perr != nil || n != c.decoded || n < 0 || strings.Trim(decoded, "0123456789") != "" ||
			c.trailer != trailer || checksumTrailers[trailer] == 0 || codings(ce, "aws-chunked") != 1 {
			t.Fatalf("accepted %q %q %q as %+v", ce, decoded, trailer, c)
		}
	})
}

// codings counts want among the comma- or line-separated codings of ce.
func codings(ce, want string) int {
	n := 0
	for _, c := range strings.FieldsFunc(ce, func(r rune) bool { return r == ',' || r == '\n' }) {
		if strings.EqualFold(strings.TrimSpace(c), want) {
			n++
		}
	}
	return n
}

// FuzzChunkedParser: a body the check passes on whole is an aws-chunked
// body of exactly the decoded length, with exactly one trailer line, the
// one announced, as an independent decoder reads it; and how the body is
// split into reads does not change the verdict.
func FuzzChunkedParser(f *testing.F) {
	for _, tc := range chunkedBodyCases {
		f.Add([]byte(tc.body), tc.decoded, uint8(7))
	}
	f.Fuzz(func(t *testing.T, body []byte, decoded int64, split uint8) {
		want := awsChunked{decoded: decoded, trailer: "x-amz-checksum-crc32"}
		p := &chunkedParser{want: want}
		err := p.feed(body)
		if err == nil {
			err = p.end()
		}
		q := &chunkedParser{want: want}
		k := int(split) % (len(body) + 1)
		err2 := q.feed(body[:k])
		if err2 == nil {
			err2 = q.feed(body[k:])
		}
		if err2 == nil {
			err2 = q.end()
		}
		if (err == nil) != (err2 == nil) {
			t.Fatalf("split at %d: %v, whole: %v", k, err2, err)
		}
		if err != nil {
			return
		}
		data, trailers, ok := decodeChunkedForTest(body)
		if !ok || int64(len(data)) != decoded || len(trailers) != 1 ||
			!bytes.EqualFold([]byte(strings.SplitN(trailers[0], ":", 2)[0]), []byte(want.trailer)) || !isASCII(trailers[0]) ||
			strings.ContainsAny(trailers[0], "\r\n") {
			t.Fatalf("accepted %q: data %d bytes (want %d), trailers %q", body, len(data), decoded, trailers)
		}
	})
}

// decodeChunkedForTest reads an aws-chunked body as RFC 9112 chunked
// coding reads it (S3's reading): chunks, then trailer lines up to an
// empty line, then nothing.
func decodeChunkedForTest(b []byte) (data []byte, trailers []string, ok bool) {
	for {
		line, rest, found := bytes.Cut(b, []byte("\r\n"))
		if !found {
			return nil, nil, false
		}
		n, err := strconv.ParseInt(string(line), 16, 64)
		if err != nil || n < 0 || n > int64(len(rest)) {
			return nil, nil, false
		}
		b = rest
		if n == 0 {
			break
		}
		data = append(data, b[:n]...)
		if b = b[n:]; !bytes.HasPrefix(b, []byte("\r\n")) {
			return nil, nil, false
		}
		b = b[2:]
	}
	for {
		line, rest, found := bytes.Cut(b, []byte("\r\n"))
		if !found {
			return nil, nil, false
		}
		b = rest
		if len(line) == 0 {
			return data, trailers, len(b) == 0
		}
		trailers = append(trailers, string(line))
	}
}

func isASCII(s string) bool {
	for _, c := range []byte(s) {
		if c >= 0x80 {
			return false
		}
	}
	return true
}
