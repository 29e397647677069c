package egress

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
)

// The AWS SDKs (since January 2025) and the AWS CLI v2 (from 2.23) send
// S3 uploads with a checksum in an unsigned trailer: X-Amz-Content-Sha256
// STREAMING-UNSIGNED-PAYLOAD-TRAILER, Content-Encoding aws-chunked,
// X-Amz-Decoded-Content-Length, X-Amz-Trailer naming the checksum header,
// and the body framed as
//
//	<hex size>\r\n<data>\r\n ... 0\r\n<trailer name>:<base64>\r\n\r\n
//
// The seed signature covers the headers only; neither chunks nor trailer
// are signed, so the proxy re-signs the headers (as for UNSIGNED-PAYLOAD)
// and passes the body on as it streams, checking its framing on the way:
// one trailer line, the one X-Amz-Trailer announces, with a checksum of
// its algorithm's length, and chunks adding up to the decoded length. A
// body that is anything else is cut one byte short (chunkedCheck), so a
// trailer cannot carry another header to S3. The signed streaming forms
// (STREAMING-AWS4-HMAC-SHA256-PAYLOAD[-TRAILER], STREAMING-AWS4-ECDSA-…)
// sign each chunk in a chain that starts from the child's placeholder
// signature, and stay refused.

// streamingUnsignedTrailer is the one streaming payload the proxy re-signs.
const streamingUnsignedTrailer = "STREAMING-UNSIGNED-PAYLOAD-TRAILER"

// checksumTrailers are the trailers a STREAMING-UNSIGNED-PAYLOAD-TRAILER
// request may announce: the checksum headers of the AWS SDKs, each with
// the size of its checksum in bytes (its value is their base64).
var checksumTrailers = map[string]int{
	"x-amz-checksum-crc32":     4,
	"x-amz-checksum-crc32c":    4,
	"x-amz-checksum-crc64nvme": 8,
	"x-amz-checksum-sha1":      20,
	"x-amz-checksum-sha256":    32,
	"x-amz-checksum-sha512":    64,
}

// awsChunked is what the headers of a STREAMING-UNSIGNED-PAYLOAD-TRAILER
// request announce of its body.
type awsChunked struct {
	decoded int64  // X-Amz-Decoded-Content-Length
	trailer string // X-Amz-Trailer, lower case: a key of checksumTrailers
}

// checkAWSChunked reads the headers that frame an aws-chunked body. For
// STREAMING-UNSIGNED-PAYLOAD-TRAILER they must be there, each once and
// well formed; with any other payload none of them may be (an aws-chunked
// body or a trailer the proxy does not check the framing of), nor a
// checksum trailer's name in X-Amz-Trailer.
func checkAWSChunked(h http.Header, payload string) (*awsChunked, error) {
	chunked, tokens := contentEncodingChunked(h.Values("Content-Encoding"))
	decoded, trailer := h.Values("X-Amz-Decoded-Content-Length"), h.Values("X-Amz-Trailer")
	if payload != streamingUnsignedTrailer {
		// Some S3-compatible servers find aws-chunked anywhere in the
		// header, so any mention of it is refused, not only the coding.
		if chunked > 0 || mentionsAWSChunked(h.Values("Content-Encoding")) || len(decoded) > 0 || len(trailer) > 0 {
			return nil, sigV4Refusal("an aws-chunked body, X-Amz-Decoded-Content-Length or X-Amz-Trailer come only with X-Amz-Content-Sha256: %s", streamingUnsignedTrailer)
		}
		return nil, nil
	}
	switch {
	case chunked != 1 || !tokens:
		return nil, sigV4Refusal("a %s request must name aws-chunked once in its Content-Encoding, a list of codings", streamingUnsignedTrailer)
	case len(decoded) != 1 || !isDecimal(decoded[0]):
		return nil, sigV4Refusal("a %s request must carry one X-Amz-Decoded-Content-Length, a decimal number", streamingUnsignedTrailer)
	case len(trailer) != 1 || checksumTrailers[trailer[0]] == 0:
		return nil, sigV4Refusal("a %s request must carry one X-Amz-Trailer naming one checksum header (x-amz-checksum-crc32, -crc32c, -crc64nvme, -sha1, -sha256 or -sha512)", streamingUnsignedTrailer)
	}
	n, err := strconv.ParseInt(decoded[0], 10, 64)
	if err != nil {
		return nil, sigV4Refusal("X-Amz-Decoded-Content-Length is out of range")
	}
	return &awsChunked{decoded: n, trailer: trailer[0]}, nil
}

// mentionsAWSChunked reports aws-chunked anywhere in vals, in any case.
func mentionsAWSChunked(vals []string) bool {
	for _, v := range vals {
		if strings.Contains(strings.ToLower(v), "aws-chunked") { // ASCII case too, and what folds to it
			return true
		}
	}
	return false
}

// contentEncodingChunked counts aws-chunked among the codings of the
// Content-Encoding headers (the AWS SDK for Go adds its own header beside
// one the caller set), and reports whether every coding is a token.
func contentEncodingChunked(vals []string) (chunked int, tokens bool) {
	tokens = true
	for _, v := range vals {
		for _, c := range strings.Split(v, ",") {
			c = strings.Trim(c, " \t")
			if strings.EqualFold(c, "aws-chunked") {
				chunked++
			}
			tokens = tokens && isToken(c)
		}
	}
	return chunked, tokens
}

// isToken reports s being an HTTP token.
func isToken(s string) bool {
	for _, c := range []byte(s) {
		ok := 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
		if !ok {
			return false
		}
	}
	return s != ""
}

// isDecimal reports s being 1 to 19 ASCII digits.
func isDecimal(s string) bool {
	return s != "" && len(s) <= 19 && strings.Trim(s, "0123456789") == ""
}

// maxChunkSizeLine and maxTrailerLine bound the lines of the framing.
const (
	maxChunkSizeLine = 16  // hex digits: an int64
	maxTrailerLine   = 256 // the longest name, ":" and value fit in 120
)

// chunkedParser checks an aws-chunked body with one trailer as its bytes
// arrive (feed), then its end (end).
type chunkedParser struct {
	want    awsChunked
	needles [][]byte // the placeholders, refused in the decoded data too
	keep    int      // the longest needle's length less one
	tail    []byte   // the decoded data's last bytes, that could begin one
	state   int
	line    []byte // the size or trailer line read so far
	left    int64  // bytes of the chunk's data still to come
	total   int64  // decoded bytes so far
	trailer bool   // the trailer line was read
}

// The parser's states: what the next byte must be.
const (
	cpSize      = iota // a hex digit of a chunk size, or \r after one
	cpSizeLF           // \n after a size
	cpData             // the chunk's data
	cpDataCR           // \r after the data
	cpDataLF           // \n after it
	cpTrailer          // the trailer line, or \r after it
	cpTrailerLF        // \n after the trailer line
	cpEndLF            // \n after the empty line that ends the body
	cpDone             // nothing more
)

var errChunked = errors.New("egress: the aws-chunked body is malformed")

func chunkedError(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errChunked, fmt.Sprintf(format, args...))
}

// feed checks the next bytes of the body.
func (p *chunkedParser) feed(b []byte) error {
	for len(b) > 0 {
		if p.state == cpData {
			n := int64(len(b))
			if n > p.left {
				n = p.left
			}
			if err := p.scan(b[:n]); err != nil {
				return err
			}
			b, p.left = b[n:], p.left-n
			if p.left == 0 {
				p.state = cpDataCR
			}
			continue
		}
		if err := p.byte(b[0]); err != nil {
			return err
		}
		b = b[1:]
	}
	return nil
}

// scan looks for a placeholder in the decoded data: S3 joins the chunks,
// so a placeholder split across two of them (never whole in the raw
// body the request's scan reads) would be stored whole.
func (p *chunkedParser) scan(data []byte) error {
	keep := p.keep
	if keep == 0 {
		return nil
	}
	// Only the bytes that could complete a needle begun in tail are
	// joined to it; the rest of data is searched where it lies.
	head := data[:min(len(data), keep)]
	joined := append(append([]byte(nil), p.tail...), head...)
	for _, nd := range p.needles {
		if bytes.Contains(joined, nd) || bytes.Contains(data, nd) {
			return errBodyPlaceholder
		}
	}
	if len(data) >= keep {
		p.tail = append(p.tail[:0], data[len(data)-keep:]...)
	} else {
		p.tail = append(p.tail, data...)
		p.tail = p.tail[max(0, len(p.tail)-keep):]
	}
	return nil
}

// byte checks one byte of the framing.
func (p *chunkedParser) byte(c byte) error {
	switch p.state {
	case cpSize:
		switch {
		case c == '\r' && len(p.line) > 0:
			p.state = cpSizeLF
		case isHexDigit(c) && len(p.line) < maxChunkSizeLine:
			p.line = append(p.line, c)
		default:
			return chunkedError("a chunk size is not 1-16 hex digits and CRLF")
		}
	case cpSizeLF:
		if c != '\n' {
			return chunkedError("a chunk size is not followed by CRLF")
		}
		return p.chunk()
	case cpDataCR:
		return p.expect(c, '\r', cpDataLF)
	case cpDataLF:
		return p.expect(c, '\n', cpSize)
	case cpTrailerLF:
		return p.expect(c, '\n', cpTrailer)
	case cpEndLF:
		return p.expect(c, '\n', cpDone)
	case cpTrailer:
		return p.trailerByte(c)
	default:
		return chunkedError("bytes after the body's end")
	}
	return nil
}

// expect moves to next when c is want.
func (p *chunkedParser) expect(c, want byte, next int) error {
	if c != want {
		return chunkedError("a chunk or the trailer is not followed by CRLF")
	}
	p.state = next
	return nil
}

// chunk starts the chunk whose size line was read.
func (p *chunkedParser) chunk() error {
	n, err := strconv.ParseInt(string(p.line), 16, 64)
	p.line = p.line[:0]
	switch {
	case err != nil:
		return chunkedError("a chunk size is out of range")
	case n == 0:
		p.state = cpTrailer
	case n > p.want.decoded-p.total:
		return chunkedError("the chunks are longer than X-Amz-Decoded-Content-Length")
	default:
		p.total += n
		p.left, p.state = n, cpData
	}
	return nil
}

// trailerByte reads the trailer line: after the last chunk, one line
// "name:base64" with the name X-Amz-Trailer announced, then an empty line.
func (p *chunkedParser) trailerByte(c byte) error {
	if c != '\r' {
		if len(p.line) >= maxTrailerLine {
			return chunkedError("the trailer line is longer than %d bytes", maxTrailerLine)
		}
		p.line = append(p.line, c)
		return nil
	}
	if len(p.line) == 0 { // the empty line: the body's end
		if !p.trailer {
			return chunkedError("the body ends without the trailer X-Amz-Trailer announces")
		}
		p.state = cpEndLF
		return nil
	}
	if p.trailer {
		return chunkedError("more than one trailer line")
	}
	name, val, ok := strings.Cut(string(p.line), ":")
	if !ok || asciiLower(name) != p.want.trailer {
		return chunkedError("the trailer line is not %s:value", p.want.trailer)
	}
	size := checksumTrailers[p.want.trailer]
	if sum, err := base64.StdEncoding.Strict().DecodeString(val); err != nil || len(sum) != size || len(val) != base64.StdEncoding.EncodedLen(size) {
		return chunkedError("the %s trailer's value is not the base64 of %d bytes", p.want.trailer, size)
	}
	p.trailer, p.line, p.state = true, p.line[:0], cpTrailerLF
	return nil
}

// end checks that the body ended where its framing does, with as many
// data bytes as X-Amz-Decoded-Content-Length.
func (p *chunkedParser) end() error {
	switch {
	case p.state != cpDone:
		return chunkedError("the body ends inside its framing")
	case p.total != p.want.decoded:
		return chunkedError("the chunks hold %d bytes, not X-Amz-Decoded-Content-Length's %d", p.total, p.want.decoded)
	}
	return nil
}

// asciiLower is s with A-Z lowered and every other byte as it is (not
// strings.ToLower, which folds the Kelvin sign to k: a name that is not
// ASCII is no checksum header's).
func asciiLower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

func isHexDigit(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}
