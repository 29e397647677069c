package egress

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

// refusalOf is a request refused on an inspected connection.
type refusalOf struct {
	reason, msg string
}

// roundTrip checks one request of an inspected connection, sends it
// upstream with its placeholders swapped and returns the response to
// give the client (the upstream's, or a refusal), and a finish to call
// with the body bytes given, which records the request's row.
func (ic *inspected) roundTrip(in *http.Request, cont func()) (*http.Response, func(down int64)) {
	p, t := ic.p, ic.t
	row := requestRow{RequestRow: RequestRow{Time: p.cfg.Now(), Port: t.Port, Proto: in.Proto, Query: QueryHash(in.URL.RawQuery)}, host: t.Host,
		method: in.Method, path: in.URL.Path}
	slot := p.requests.reserve() // rows in the order requests arrive
	refuse := func(r refusalOf) (*http.Response, func(int64)) {
		p.rows.finish(p.open(t, Deny, r.reason, r.msg, row.Time), 0, 0, 0, false, p.cfg.Now())
		row.Decision, row.Reason, row.Status = Deny, r.reason, http.StatusForbidden
		return refusalResponse(in, r.msg), func(int64) { p.requests.set(slot, row) }
	}
	o, r := ic.outgoing(in)
	if r != nil {
		return refuse(*r)
	}
	out, scan := o.req, o.scan
	row.path = out.URL.EscapedPath()
	if expectsContinue(in.Header) {
		cont()
	}
	if o.sigv4 != nil {
		release, r := ic.resign(o)
		defer release()
		if r != nil {
			return refuse(*r)
		}
	}
	var rs []replacement // after the re-signing: its key id and token too
	if o.injected || injectsInto(p.cfg.Inspect.Inject, t.Host, t.Port) {
		rs = replacements(p.cfg.Inspect.Inject, in.Header, out.Header)
	}
	resp, err := ic.tr.RoundTrip(out)
	if err == nil {
		if err = scrubResponse(resp, rs, o.injected); err != nil {
			resp.Body.Close()
		}
	}
	if scan != nil {
		row.BytesUp = scan.n
	}
	switch {
	case scan != nil && scan.found:
		if resp != nil {
			resp.Body.Close()
		}
		return refuse(refusalOf{reasonPlaceholder, ic.sentence((&placeholderError{where: "in the body of " + in.Method + " " + row.path}).Error())})
	case scan != nil && scan.capped:
		if resp != nil {
			resp.Body.Close()
		}
		return refuse(refusalOf{reasonBodyCap, ic.sentence(fmt.Sprintf("the body of %s %s is over the rule's cap of %d bytes", in.Method, row.path, p.cfg.Inspect.MaxBody))})
	case o.sigv4 != nil && o.sigv4.check != nil && o.sigv4.check.bad && errors.Is(o.sigv4.check.err, errBodyPlaceholder):
		if resp != nil {
			resp.Body.Close()
		}
		return refuse(refusalOf{reasonPlaceholder, ic.sentence((&placeholderError{where: "in the body of " + in.Method + " " + row.path + ", split across its aws-chunked framing"}).Error())})
	case o.sigv4 != nil && o.sigv4.check != nil && o.sigv4.check.bad:
		if resp != nil {
			resp.Body.Close()
		}
		return refuse(refusalOf{reasonSigV4, ic.sentence(fmt.Sprintf("the body of %s %s %s; it was cut before its end", in.Method, row.path, o.sigv4.check.what))})
	case err != nil:
		msg := fmt.Sprintf("coily: sending %s %s to %s failed: %v", in.Method, row.path, t, err)
		row.Decision, row.Reason, row.Status = Allow, "upstream-error", http.StatusBadGateway
		return textResponse(in, http.StatusBadGateway, msg), func(int64) { p.requests.set(slot, row) }
	}
	row.Decision, row.Status, row.Injected = Allow, resp.StatusCode, o.injected
	return resp, func(down int64) {
		row.BytesDown = down
		p.requests.set(slot, row)
	}
}

// sentence is a refusal's text: the reason, the host and the rule.
func (ic *inspected) sentence(what string) string {
	return fmt.Sprintf("coily: %s (host %s, rule %q)", what, ic.t, ic.p.cfg.Rule)
}

// outgoingReq is a request checked and ready to go upstream.
type outgoingReq struct {
	req      *http.Request
	scan     *scanReader // its body's, nil without one
	injected bool
	sigv4    *sigV4Plan // non-nil: re-sign it (resign) before sending
}

// outgoing checks in and builds the request sent upstream: the same
// method, path, query and headers (hop-by-hop ones removed, placeholders
// swapped) to the CONNECT host, and its body through a scanReader. A
// request the rules refuse is a refusal.
func (ic *inspected) outgoing(in *http.Request) (outgoingReq, *refusalOf) {
	t, insp := ic.t, ic.p.cfg.Inspect
	authority := t.Host
	if t.Port != 443 {
		authority = t.Host + ":" + strconv.Itoa(t.Port)
	}
	switch {
	case in.Host != authority && in.Host != t.Host+":"+strconv.Itoa(t.Port):
		return outgoingReq{}, &refusalOf{reasonHostMismatch, ic.sentence(fmt.Sprintf("the request names host %q, not the CONNECT host", in.Host))}
	case in.URL.IsAbs() || !strings.HasPrefix(in.URL.EscapedPath(), "/") || in.URL.Opaque != "":
		return outgoingReq{}, &refusalOf{reasonBadRequest, ic.sentence("only origin-form request targets (/path) go through an inspected connection")}
	}
	path, err := canonPath(requestPath(in))
	if err != nil {
		return outgoingReq{}, &refusalOf{reasonPath, ic.sentence(fmt.Sprintf("the path of %s %s is refused (%v): a server could read it as another path than the one the rules check", in.Method, in.URL.EscapedPath(), err))}
	}
	ins := insp.Inject
	if containsPlaceholder(in.RequestURI, ins) || containsPlaceholder(in.URL.RawQuery, ins) || containsPlaceholder(in.URL.Path, ins) ||
		containsPlaceholder(unescape(in.URL.RawQuery), ins) || containsPlaceholder(path, ins) {
		return outgoingReq{}, &refusalOf{reasonPlaceholder, ic.sentence((&placeholderError{where: "in the URL of " + in.Method + " " + path}).Error())}
	}
	if rules := insp.Rules[t.Host]; len(rules) > 0 && !anyAllows(rules, in.Method, path) {
		return outgoingReq{}, &refusalOf{reasonHTTPRule, ic.sentence(fmt.Sprintf("%s %s is not allowed by the rule's http rules for this host", in.Method, path))}
	}
	if insp.MaxBody > 0 && in.ContentLength > insp.MaxBody {
		return outgoingReq{}, &refusalOf{reasonBodyCap, ic.sentence(fmt.Sprintf("the body of %s %s (%d bytes) is over the rule's cap of %d bytes", in.Method, path, in.ContentLength, insp.MaxBody))}
	}
	h := in.Header.Clone()
	stripHopByHop(h)
	h.Del("Expect")
	plan, err := planSigV4(h, t.Host, t.Port, path, in.URL.RawQuery, ins)
	if err != nil {
		return outgoingReq{}, ic.injectRefusal(err)
	}
	used, err := injectHeaders(h, t.Host, t.Port, path, ins)
	if err != nil {
		return outgoingReq{}, &refusalOf{reasonPlaceholder, ic.sentence(err.Error())}
	}
	if len(used) > 0 || plan != nil { // an echo of the secret must come back readable to be replaced (dropped before re-signing)
		h.Del("Accept-Encoding")
	}
	send := path
	if plan != nil {
		if err := checkSigV4Query(in.URL.RawQuery); err != nil {
			return outgoingReq{}, ic.injectRefusal(err)
		}
		if plan.auth.Service == "s3" { // sent and signed as S3 re-escapes it
			send = s3Path(path)
		}
	}
	u, err := url.Parse("https://" + authority + send)
	if err != nil || u.EscapedPath() != send { // never: canonPath's (and s3Path's) output parses as itself
		return outgoingReq{}, &refusalOf{reasonPath, ic.sentence(fmt.Sprintf("the path %s would not be sent as checked", path))}
	}
	u.RawQuery = in.URL.RawQuery
	out, err := http.NewRequestWithContext(ic.ctx, in.Method, u.String(), nil)
	if err != nil {
		return outgoingReq{}, &refusalOf{reasonBadRequest, ic.sentence(err.Error())}
	}
	out.Header, out.Host = h, authority
	var scan *scanReader
	if in.Body != nil && in.Body != http.NoBody && in.ContentLength != 0 {
		scan = newScanReader(in.Body, ins, insp.MaxBody)
		out.Body, out.ContentLength = scan, in.ContentLength
	}
	return outgoingReq{req: out, scan: scan, injected: len(used) > 0 || plan != nil, sigv4: plan}, nil
}

// requestPath is the request's path as the client sent it, escaped,
// without its query.
func requestPath(in *http.Request) string {
	if in.RequestURI == "" {
		return in.URL.EscapedPath()
	}
	p, _, _ := strings.Cut(in.RequestURI, "?")
	return p
}

func unescape(s string) string {
	if u, err := url.QueryUnescape(s); err == nil {
		return u
	}
	return s
}

func anyAllows(rules []HTTPRule, method, path string) bool {
	for _, r := range rules {
		if r.Allows(method, path) {
			return true
		}
	}
	return false
}

// refusalResponse is a 403 with the sentence as its body.
func refusalResponse(req *http.Request, msg string) *http.Response {
	return textResponse(req, http.StatusForbidden, msg)
}

func textResponse(req *http.Request, status int, msg string) *http.Response {
	body := msg + "\n"
	h := http.Header{}
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("X-Coily-Egress", "refused")
	return &http.Response{StatusCode: status, Status: fmt.Sprintf("%d %s", status, http.StatusText(status)),
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, Header: h, Request: req, Close: true,
		ContentLength: int64(len(body)), Body: io.NopCloser(strings.NewReader(body))}
}

// errSmuggle is a head whose framing hops could read differently.
var errSmuggle = errors.New("the request head's framing is ambiguous")

// checkHead peeks at the next request head (without consuming it) and
// refuses framing that one hop could read otherwise than the next:
// Content-Length with Transfer-Encoding, several of either, a
// Transfer-Encoding other than "chunked", obsolete line folding, bare LF
// line ends, or header names with spaces before the colon. io.EOF: the
// client closed between requests.
func checkHead(br *bufio.Reader) error {
	for {
		// What is buffered first: a client that sent its next request
		// with the last (pipelined) waits for an answer, not to send more.
		if buf, _ := br.Peek(br.Buffered()); len(buf) > 0 {
			if !methodStart(buf) { // a TLS ClientHello (a second hop), or any other stream
				return errors.New("the stream does not begin with an HTTP request line")
			}
			if i := bytes.Index(buf, []byte("\r\n\r\n")); i >= 0 && i+4 <= maxHeaderBytes {
				return checkHeadLines(buf[:i+2])
			}
			if len(buf) >= maxHeaderBytes {
				return errors.New("request head longer than 64 KiB")
			}
		}
		if _, err := br.Peek(br.Buffered() + 1); err != nil {
			if br.Buffered() == 0 {
				return io.EOF
			}
			return fmt.Errorf("incomplete request head: %w", err)
		}
	}
}

// methodStart reports whether b can begin a request line: token
// characters up to the first space. It answers at the first byte that
// cannot, rather than waiting for a head that will never end.
func methodStart(b []byte) bool {
	for i, c := range b {
		switch {
		case c == ' ' && i > 0:
			return true
		case c >= 'A' && c <= 'Z', c >= 'a' && c <= 'z', c >= '0' && c <= '9', strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// checkHeadLines checks a request head, request line included, each line
// ending in CRLF.
func checkHeadLines(head []byte) error {
	lines := bytes.Split(head, []byte("\r\n"))
	var cl, te int
	for i, l := range lines[:len(lines)-1] {
		if bytes.IndexByte(l, '\n') >= 0 || bytes.IndexByte(l, '\r') >= 0 {
			return fmt.Errorf("%w: a bare CR or LF", errSmuggle)
		}
		if i == 0 {
			continue
		}
		if len(l) > 0 && (l[0] == ' ' || l[0] == '\t') {
			return fmt.Errorf("%w: folded header line", errSmuggle)
		}
		name, val, ok := bytes.Cut(l, []byte(":"))
		if !ok || len(name) == 0 || bytes.ContainsAny(name, " \t") {
			return fmt.Errorf("%w: malformed header line", errSmuggle)
		}
		switch strings.ToLower(string(name)) {
		case "content-length":
			cl++
		case "transfer-encoding":
			te++
			if !strings.EqualFold(strings.TrimSpace(string(val)), "chunked") {
				return fmt.Errorf("%w: Transfer-Encoding %q", errSmuggle, bytes.TrimSpace(val))
			}
		}
	}
	switch {
	case cl > 0 && te > 0:
		return fmt.Errorf("%w: both Content-Length and Transfer-Encoding", errSmuggle)
	case cl > 1 || te > 1:
		return fmt.Errorf("%w: repeated Content-Length or Transfer-Encoding", errSmuggle)
	}
	return nil
}

// expectsContinue reports a request that waits for "100 Continue" before
// sending its body (RFC 9110 §10.1.1: the value is case-insensitive).
func expectsContinue(h http.Header) bool {
	return strings.EqualFold(strings.TrimSpace(h.Get("Expect")), "100-continue")
}
