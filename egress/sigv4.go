package egress

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
)

// Payload hashes a SigV4 request may name in X-Amz-Content-Sha256.
const (
	unsignedPayload = "UNSIGNED-PAYLOAD"
	streamingPrefix = "STREAMING-"
)

// MaxSigV4Buffer bounds the body the proxy buffers to hash a SigV4
// request that names no payload hash (every service but S3), when the
// rule sets no smaller max_body.
const MaxSigV4Buffer = 8 << 20

// sigV4Plan is how one request signed with an injection's placeholders
// is re-signed with the real key.
type sigV4Plan struct {
	in   Injection
	auth sigV4Auth
	// payload is X-Amz-Content-Sha256 as sent: 64 hex digits the body
	// must hash to, UNSIGNED-PAYLOAD, STREAMING-UNSIGNED-PAYLOAD-TRAILER,
	// or "" (none: the body is buffered and hashed).
	payload string
	chunked *awsChunked // the framing announced, for STREAMING-UNSIGNED-PAYLOAD-TRAILER
	needles [][]byte    // every placeholder of the exec's injections, for the decoded body
	check   *bodyCheck  // the body's check when payload is a hash or streamed
}

// sigV4Error is a SigV4 request the proxy will not re-sign; its text is
// the 403's sentence.
type sigV4Error struct{ what string }

func (e *sigV4Error) Error() string { return e.what }

func sigV4Refusal(format string, args ...any) error {
	return &sigV4Error{what: fmt.Sprintf(format, args...)}
}

// planSigV4 finds the request whose Authorization carries the access key
// placeholder of a sigv4 injection, checks it, and takes its
// Authorization, X-Amz-Security-Token and X-Amz-Date out of h (the
// signer writes them anew). nil, nil: no sigv4 placeholder in the
// Authorization (the headers are then checked like any).
func planSigV4(h http.Header, host string, port int, path, rawQuery string, ins []Injection) (*sigV4Plan, error) {
	vals := h.Values("Authorization")
	var mine []Injection
	for _, in := range ins {
		if in.Form == FormSigV4 && in.AWS != nil && slices2Contains(vals, in.Placeholder) {
			mine = append(mine, in)
		}
	}
	if len(mine) == 0 {
		return nil, nil
	}
	if len(vals) != 1 {
		return nil, sigV4Refusal("a request carrying the AWS key placeholder has %d Authorization headers", len(vals))
	}
	auth, err := parseSigV4Auth(vals[0])
	if err != nil {
		return nil, sigV4Refusal("the Authorization header carrying the AWS key placeholder is not one the proxy re-signs (%v)", err)
	}
	var in Injection
	found := false
	for _, c := range mine {
		if c.Placeholder == auth.AccessKey && c.matches(host, port, path) {
			in, found = c, true
			break
		}
	}
	if !found {
		return nil, &placeholderError{where: "in header Authorization to " + host}
	}
	if err := checkSessionToken(h.Values("X-Amz-Security-Token"), in.AWS.TokenPlaceholder); err != nil {
		return nil, err
	}
	if err := checkCopySource(h, in); err != nil {
		return nil, err
	}
	payload, err := payloadOf(h.Values("X-Amz-Content-Sha256"))
	if err != nil {
		return nil, err
	}
	if err := checkVendingService(auth.Service, rawQuery, payload); err != nil {
		return nil, err
	}
	chunked, err := checkAWSChunked(h, payload)
	if err != nil {
		return nil, err
	}
	for _, k := range []string{"Authorization", "X-Amz-Security-Token", "X-Amz-Date"} {
		h.Del(k)
	}
	return &sigV4Plan{in: in, auth: auth, payload: payload, chunked: chunked}, nil
}

// slices2Contains reports a value of vals containing s.
func slices2Contains(vals []string, s string) bool {
	for _, v := range vals {
		if strings.Contains(v, s) {
			return true
		}
	}
	return false
}

// checkSessionToken: the child sends its token placeholder, once, when
// it holds one, and no token otherwise.
func checkSessionToken(vals []string, placeholder string) error {
	switch {
	case placeholder == "" && len(vals) == 0:
		return nil
	case placeholder == "":
		return sigV4Refusal("the request carries an X-Amz-Security-Token, but the rule injects a key without a session token")
	case len(vals) != 1 || vals[0] != placeholder:
		return sigV4Refusal("X-Amz-Security-Token must be the session token placeholder, sent once")
	}
	return nil
}

// payloadOf reads X-Amz-Content-Sha256: absent, UNSIGNED-PAYLOAD,
// STREAMING-UNSIGNED-PAYLOAD-TRAILER (nothing of the body signed) or a
// SHA-256 in hex. Another streaming payload (aws-chunked, each chunk
// signed in a chain that starts from the request's signature) cannot be
// re-signed without re-framing the body, and is refused.
func payloadOf(vals []string) (string, error) {
	switch {
	case len(vals) == 0:
		return "", nil
	case len(vals) > 1:
		return "", sigV4Refusal("the request has several X-Amz-Content-Sha256 headers")
	case vals[0] == unsignedPayload, vals[0] == streamingUnsignedTrailer:
		return vals[0], nil
	case isLowerHex(vals[0], 64):
		return vals[0], nil
	case strings.HasPrefix(vals[0], streamingPrefix):
		return "", sigV4Refusal("the request body is signed chunk by chunk (X-Amz-Content-Sha256: %.64s), which the proxy cannot re-sign; "+
			"keep the AWS key in the command's environment (short-lived STS credentials) for this command, or make the client send an unchunked body "+
			"or %s (the AWS CLI, boto3 and the AWS SDKs do over HTTPS; the Java SDK v1 with disableChunkedEncoding)", vals[0], streamingUnsignedTrailer)
	}
	return "", sigV4Refusal("X-Amz-Content-Sha256 is neither a SHA-256 in lower-case hex nor UNSIGNED-PAYLOAD")
}

// prepareBody readies out's body for plan before it is signed: a hash the
// request names is checked as the body streams (hashCheck); without one
// the body is read whole (at most limit bytes) and hashed. It returns the
// payload hash to sign.
func (plan *sigV4Plan) prepareBody(out *http.Request, limit int64) (string, error) {
	switch {
	case plan.payload == unsignedPayload:
		return unsignedPayload, nil
	case plan.payload == streamingUnsignedTrailer && out.Body == nil:
		return "", sigV4Refusal("a %s request has no body (its framing holds at least the last chunk and the trailer)", streamingUnsignedTrailer)
	case plan.payload == streamingUnsignedTrailer:
		plan.check = newChunkedCheck(out.Body, *plan.chunked, plan.needles)
		out.Body = plan.check
		return streamingUnsignedTrailer, nil
	case plan.payload != "" && out.Body == nil:
		if plan.payload != emptySHA256 {
			return "", sigV4Refusal("X-Amz-Content-Sha256 names a body, but the request has none")
		}
		return plan.payload, nil
	case plan.payload != "":
		plan.check = newHashCheck(out.Body, plan.payload)
		out.Body = plan.check
		return plan.payload, nil
	case out.Body == nil:
		if plan.auth.Service == "sts" {
			if err := checkSTSAction(out.URL.RawQuery, nil); err != nil {
				return "", err
			}
		}
		return emptySHA256, nil
	}
	data, err := io.ReadAll(io.LimitReader(out.Body, limit+1))
	switch {
	case err != nil:
		return "", err
	case int64(len(data)) > limit:
		return "", sigV4Refusal("the request names no X-Amz-Content-Sha256 and its body is over the %d bytes the proxy buffers to hash it", limit)
	}
	if plan.auth.Service == "sts" {
		if err := checkSTSAction(out.URL.RawQuery, data); err != nil {
			return "", err
		}
	}
	sum := sha256.Sum256(data)
	out.Body, out.ContentLength = io.NopCloser(bytes.NewReader(data)), int64(len(data))
	return hex.EncodeToString(sum[:]), nil
}

// emptySHA256 is the SHA-256 of nothing.
const emptySHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

// sign signs out (SigV4, header form) with the real key, for the region
// and service the child signed for, now. S3 signs its path as sent; the
// other services escape it once more.
func (plan *sigV4Plan) sign(ctx context.Context, out *http.Request, payload string, now time.Time) error {
	creds := aws.Credentials{AccessKeyID: plan.in.AWS.AccessKeyID, SecretAccessKey: plan.in.Secret, SessionToken: plan.in.AWS.SessionToken}
	s3 := plan.auth.Service == "s3"
	return v4.NewSigner().SignHTTP(ctx, creds, out, payload, plan.auth.Service, plan.auth.Region, now,
		func(o *v4.SignerOptions) { o.DisableURIPathEscaping = s3 })
}

// errPayloadHash ends a body that does not hash to its
// X-Amz-Content-Sha256.
var errPayloadHash = errors.New("egress: the request body does not match its X-Amz-Content-Sha256")

// bodyCheck passes a body on while checking it (feed sees every byte in
// order, end is called at its end) and holds back its last byte until the
// body's end shows it is right: a body that is not is cut short (the
// upstream never receives a whole request with it) and fails with the
// check's error.
type bodyCheck struct {
	r    io.ReadCloser
	feed func([]byte) error
	end  func() error
	what string // what a bad body is not, for the refusal's sentence
	held []byte // at most one byte, read but not yet passed on
	buf  []byte // the read buffer
	err  error
	bad  bool
}

// newHashCheck checks that r hashes to want (SHA-256, lower-case hex).
func newHashCheck(r io.ReadCloser, want string) *bodyCheck {
	h := sha256.New()
	return &bodyCheck{r: r, what: "does not hash to its X-Amz-Content-Sha256",
		feed: func(b []byte) error { h.Write(b); return nil },
		end: func() error {
			if hex.EncodeToString(h.Sum(nil)) != want {
				return errPayloadHash
			}
			return nil
		}}
}

// newChunkedCheck checks that r is the aws-chunked body want announces.
// needles are the placeholders, refused in the decoded data (errBodyPlaceholder).
func newChunkedCheck(r io.ReadCloser, want awsChunked, needles [][]byte) *bodyCheck {
	p := &chunkedParser{want: want, needles: needles}
	for _, nd := range needles {
		p.keep = max(p.keep, len(nd)-1)
	}
	return &bodyCheck{r: r, feed: p.feed, end: p.end,
		what: "is not the aws-chunked body with one " + want.trailer + " trailer its headers announce"}
}

func (c *bodyCheck) Read(p []byte) (int, error) {
	if c.err != nil {
		return 0, c.err
	}
	if len(p) == 0 {
		return 0, nil
	}
	for {
		if cap(c.buf) < len(p)+1 {
			c.buf = make([]byte, len(p)+1)
		}
		buf := c.buf[:len(p)+1] // reused: what is kept of it is copied out before the next read
		copy(buf, c.held)
		n, err := c.r.Read(buf[len(c.held):])
		if ferr := c.feed(buf[len(c.held) : len(c.held)+n]); ferr != nil {
			c.bad, c.held, c.err = true, nil, ferr
			return 0, ferr
		}
		all := buf[:len(c.held)+n]
		if errors.Is(err, io.EOF) {
			if eerr := c.end(); eerr != nil {
				c.bad, c.held, c.err = true, nil, eerr
				return 0, eerr
			}
			c.held = nil
			k := copy(p, all)
			if k < len(all) { // a first read that filled buf and ended: the rest goes out next (end is checked again, alike)
				c.held = append([]byte(nil), all[k:]...)
				return k, nil
			}
			c.err = io.EOF
			return k, io.EOF
		}
		if err != nil {
			c.err = err
			return 0, err
		}
		if len(all) <= 1 {
			c.held = append(c.held[:0], all...)
			continue
		}
		k := copy(p, all[:len(all)-1])
		c.held = append([]byte(nil), all[k:]...)
		return k, nil
	}
}

func (c *bodyCheck) Close() error { return c.r.Close() }

// reasonSigV4 is a SigV4 request the proxy does not re-sign.
const reasonSigV4 = "sigv4"

// injectRefusal is the refusal of an injection's error: a placeholder
// where it does not belong, or a SigV4 request the proxy cannot re-sign.
func (ic *inspected) injectRefusal(err error) *refusalOf {
	var se *sigV4Error
	if errors.As(err, &se) {
		return &refusalOf{reasonSigV4, ic.sentence(se.Error())}
	}
	return &refusalOf{reasonPlaceholder, ic.sentence(err.Error())}
}

// sigV4BufferSlots is how many SigV4 bodies one proxy buffers at once
// (each at most MaxSigV4Buffer): more requests wait for a slot, so that
// a command cannot make the server hold a buffer per HTTP/2 stream.
const sigV4BufferSlots = 2

// resign readies o's body and signs o.req with the real key of its
// injection. release (always non-nil) frees the buffer slot a body
// without a payload hash took; call it once the request is sent.
func (ic *inspected) resign(o outgoingReq) (release func(), _ *refusalOf) {
	release = func() {}
	limit := int64(MaxSigV4Buffer)
	if m := ic.p.cfg.Inspect.MaxBody; m > 0 && m < limit {
		limit = m
	}
	if o.sigv4.payload == "" && o.req.Body != nil {
		if !ic.bufferSlot() {
			return release, &refusalOf{reasonSigV4, ic.sentence("the connection ended while the request waited to be buffered")}
		}
		release = func() { <-ic.p.sigv4Buf }
	}
	if o.scan != nil { // the placeholders the raw body is scanned for
		o.sigv4.needles = o.scan.needles
	}
	payload, err := o.sigv4.prepareBody(o.req, limit)
	if err == nil {
		err = o.sigv4.sign(ic.ctx, o.req, payload, time.Now())
	}
	if err != nil {
		if o.scan != nil && o.scan.found {
			return release, &refusalOf{reasonPlaceholder, ic.sentence((&placeholderError{where: "in the body of " + o.req.Method + " " + o.req.URL.EscapedPath()}).Error())}
		}
		if o.scan != nil && o.scan.capped {
			return release, &refusalOf{reasonBodyCap, ic.sentence(fmt.Sprintf("the body of %s %s is over the rule's cap", o.req.Method, o.req.URL.EscapedPath()))}
		}
		return release, ic.injectRefusal(err)
	}
	return release, nil
}

// bufferSlot takes a slot of sigv4Buf, waiting for one while the
// connection lasts; false: it ended first.
func (ic *inspected) bufferSlot() bool {
	select {
	case ic.p.sigv4Buf <- struct{}{}:
		return true
	default:
	}
	ic.p.sigv4Waiting.Add(1)
	defer ic.p.sigv4Waiting.Add(-1)
	select {
	case ic.p.sigv4Buf <- struct{}{}:
		return true
	case <-ic.ctx.Done():
		return false
	}
}
