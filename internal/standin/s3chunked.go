package standin

import (
	"bytes"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"hash/crc64"
	"net/http"
	"strconv"
	"strings"
)

// streamingUnsignedTrailer is the payload hash of an upload whose body is
// aws-chunked with an unsigned checksum trailer: what the AWS SDKs and
// CLI v2 send for PutObject and UploadPart over HTTPS by default. Only
// the headers are signed (the seed signature); the stand-in decodes the
// body, checks the trailer's checksum against the data, and stores the
// data.
const streamingUnsignedTrailer = "STREAMING-UNSIGNED-PAYLOAD-TRAILER"

// crc64NVME is the CRC-64/NVME polynomial, bit-reversed as crc64.MakeTable
// wants it.
const crc64NVME = 0x9a6c9329ac4bc9b5

// trailerChecksums are the checksum trailers S3 reads, each with its hash.
var trailerChecksums = map[string]func() hash.Hash{
	"x-amz-checksum-crc32":     func() hash.Hash { return crc32.NewIEEE() },
	"x-amz-checksum-crc32c":    func() hash.Hash { return crc32.New(crc32.MakeTable(crc32.Castagnoli)) },
	"x-amz-checksum-crc64nvme": func() hash.Hash { return crc64.New(crc64.MakeTable(crc64NVME)) },
	"x-amz-checksum-sha1":      sha1.New,
	"x-amz-checksum-sha256":    sha256.New,
	"x-amz-checksum-sha512":    sha512.New,
}

// decodeAWSChunked decodes body, framed as the headers h announce
// (Content-Encoding aws-chunked, X-Amz-Decoded-Content-Length,
// X-Amz-Trailer): chunks "<hex size>\r\n<data>\r\n", a last chunk
// "0\r\n", the trailer lines "name:value\r\n" and an empty line. It
// returns the data and the checksum header the trailer carried; a
// framing error, a trailer X-Amz-Trailer did not announce, or a checksum
// the data does not have is an error.
func decodeAWSChunked(h http.Header, body []byte) (data []byte, checksum string, _ error) {
	if !slicesContainsFold(strings.Split(strings.Join(h.Values("Content-Encoding"), ","), ","), "aws-chunked") {
		return nil, "", errors.New("Content-Encoding does not name aws-chunked")
	}
	decoded, err := strconv.ParseInt(h.Get("X-Amz-Decoded-Content-Length"), 10, 64)
	if err != nil || decoded < 0 {
		return nil, "", errors.New("X-Amz-Decoded-Content-Length is not a length")
	}
	name := strings.ToLower(strings.TrimSpace(h.Get("X-Amz-Trailer")))
	newHash, ok := trailerChecksums[name]
	if !ok {
		return nil, "", fmt.Errorf("X-Amz-Trailer %q is not a checksum header", name)
	}
	rest := body
	for {
		line, after, ok := bytes.Cut(rest, []byte("\r\n"))
		if !ok {
			return nil, "", errors.New("a chunk size line does not end")
		}
		n, err := strconv.ParseInt(string(line), 16, 64)
		if err != nil || n < 0 || n > int64(len(after)) {
			return nil, "", fmt.Errorf("chunk size %q", line)
		}
		rest = after
		if n == 0 {
			break
		}
		data = append(data, rest[:n]...)
		if rest = rest[n:]; !bytes.HasPrefix(rest, []byte("\r\n")) {
			return nil, "", errors.New("a chunk's data does not end with CRLF")
		}
		rest = rest[2:]
	}
	if int64(len(data)) != decoded {
		return nil, "", fmt.Errorf("%d bytes decoded, X-Amz-Decoded-Content-Length says %d", len(data), decoded)
	}
	trailer, ok := bytes.CutSuffix(rest, []byte("\r\n\r\n"))
	if !ok || bytes.Contains(trailer, []byte("\r\n")) {
		return nil, "", errors.New("the body does not end with one trailer line and an empty line")
	}
	k, v, ok := strings.Cut(string(trailer), ":")
	if !ok || !asciiEqualFold(k, name) {
		return nil, "", fmt.Errorf("the trailer is not the %s X-Amz-Trailer announced", name)
	}
	sum := newHash()
	sum.Write(data)
	if v != base64.StdEncoding.EncodeToString(sum.Sum(nil)) {
		return nil, "", fmt.Errorf("the data does not have the %s of its trailer", name)
	}
	return data, name, nil
}

func slicesContainsFold(vals []string, s string) bool {
	for _, v := range vals {
		if strings.EqualFold(strings.TrimSpace(v), s) {
			return true
		}
	}
	return false
}

// asciiEqualFold compares a and b with A-Z and a-z alike and nothing else
// folded (strings.EqualFold takes the Kelvin sign for k; S3 would not).
func asciiEqualFold(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range len(a) {
		x, y := a[i], b[i]
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}
