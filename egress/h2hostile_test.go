package egress

import (
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// TestInspectH2HostileFrames: a child offering h2 alone gets HTTP/2 and
// may write any frames; to an HTTP/1.1 upstream, what could frame a
// second request there (connection-specific headers, a Content-Length the
// DATA disagrees with, CR or LF in a value or the path, a name that is
// not lower-case) is refused and reaches nothing (a body shorter than its
// Content-Length, as an abandoned upload: the head and what was sent); a
// Host header other than :authority and a TE header do not reach the
// upstream as sent.
func TestInspectH2HostileFrames(t *testing.T) {
	e := newInspectEnv(t, nil, 0, FormBearer)
	auth := e.url(apiHost, "")[len("https://"):]
	for _, c := range []struct {
		name    string
		headers [][2]string // after the pseudo-headers
		path    string
		body    string
		refused bool   // a 4xx or RST_STREAM, nothing upstream
		cut     bool   // a 4xx, 5xx or RST_STREAM; upstream at most the head and the first bytes sent
		seen    string // else: what the upstream's record must hold
		unseen  string // and must not
	}{
		{name: "transfer-encoding", headers: [][2]string{{"transfer-encoding", "chunked"}}, body: "0\r\n\r\nGET /x HTTP/1.1\r\n\r\n", refused: true},
		{name: "connection", headers: [][2]string{{"connection", "keep-alive"}}, refused: true},
		{name: "keep-alive", headers: [][2]string{{"keep-alive", "5"}}, refused: true},
		{name: "upgrade", headers: [][2]string{{"upgrade", "h2c"}}, refused: true},
		{name: "content-length more than the data", headers: [][2]string{{"content-length", "40"}}, body: "abc", cut: true},
		{name: "content-length less than the data", headers: [][2]string{{"content-length", "1"}}, body: "abc\r\nGET /x HTTP/1.1\r\n\r\n", cut: true},
		{name: "CRLF in a value", headers: [][2]string{{"x-a", "1\r\nContent-Length: 0\r\n\r\nGET /x HTTP/1.1"}}, refused: true},
		{name: "LF in a value", headers: [][2]string{{"x-a", "1\nHost: evil.test"}}, refused: true},
		{name: "CRLF in the path", path: "/repos/alice/app HTTP/1.1\r\nHost: evil.test\r\n\r\nGET /x", refused: true},
		{name: "upper-case name", headers: [][2]string{{"X-Upper", "1"}}, refused: true},
		{name: "colon in a name", headers: [][2]string{{"x:a", "1"}}, refused: true},
		{name: "host other than :authority", headers: [][2]string{{"host", "evil.test"}}, seen: "GET " + auth + " /repos/alice/app", unseen: "evil.test"},
		{name: "te trailers", headers: [][2]string{{"te", "trailers"}}, seen: "GET " + auth + " /repos/alice/app", unseen: "Te:"},
	} {
		t.Run(c.name, func(t *testing.T) {
			mark := fmt.Sprintf("case-%d", rand.Int64())
			status, rst := e.h2Raw(t, c.path, append([][2]string{{"x-case", mark}}, c.headers...), c.body)
			var got []string // what the upstream saw of this request
			for _, s := range e.seen.all() {
				if strings.Contains(s, mark) {
					got = append(got, s)
				}
			}
			if c.cut { // as an upload the child abandons: never a second request
				var sent string // the body the upstream read
				if len(got) == 1 {
					sent = got[0][strings.LastIndex(got[0], "] ")+2:]
				}
				if (status < 400 && rst == 0) || len(got) > 1 || len(sent) > 3 || !strings.HasPrefix(c.body, sent) {
					t.Errorf("status %d, RST_STREAM %v, upstream saw %q; want it refused, the upstream given at most what was sent", status, rst, got)
				}
				return
			}
			if c.refused {
				if (status < 400 && rst == 0) || len(got) != 0 {
					t.Errorf("status %d, RST_STREAM %v, upstream saw %q; want it refused and nothing upstream", status, rst, got)
				}
				return
			}
			if status != 200 || len(got) != 1 || !strings.Contains(got[0], c.seen) || strings.Contains(got[0], c.unseen) {
				t.Errorf("status %d, RST_STREAM %v, upstream saw %q; want one request holding %q, not %q", status, rst, got, c.seen, c.unseen)
			}
		})
	}
}

// h2Raw opens an inspected connection to apiHost offering h2 alone and
// sends one GET (POST with a body) of path (default /repos/alice/app)
// with the placeholder and headers, written by hand (hpack encodes
// anything); it returns the response's status or the stream's reset.
func (e *inspectEnv) h2Raw(t *testing.T, path string, headers [][2]string, body string) (int, http2.ErrCode) {
	t.Helper()
	_, _, c := e.tp.raw(t, connect(apiHost+":"+e.port))
	tc := tls.Client(c, &tls.Config{ServerName: apiHost, RootCAs: caPool(e.ca), NextProtos: []string{"h2"}})
	tc.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(tc, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(tc, tc)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	var block bytes.Buffer
	enc := hpack.NewEncoder(&block)
	method := "GET"
	if body != "" {
		method = "POST"
	}
	if path == "" {
		path = "/repos/alice/app"
	}
	fields := [][2]string{{":method", method}, {":scheme", "https"}, {":authority", apiHost + ":" + e.port}, {":path", path},
		{"authorization", "Bearer " + e.placeholder}}
	for _, f := range append(fields, headers...) {
		enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block.Bytes(), EndHeaders: true, EndStream: body == ""}); err != nil {
		t.Fatal(err)
	}
	if body != "" {
		if err := fr.WriteData(1, true, []byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	dec := hpack.NewDecoder(4096, nil)
	for {
		f, err := fr.ReadFrame()
		if errors.Is(err, io.EOF) {
			return 0, http2.ErrCodeProtocol // the connection closed: nothing answered
		} else if err != nil {
			t.Fatalf("reading the answer: %v", err)
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				fr.WriteSettingsAck()
			}
		case *http2.GoAwayFrame:
			return 0, f.ErrCode
		case *http2.RSTStreamFrame:
			if f.StreamID == 1 {
				return 0, f.ErrCode
			}
		case *http2.HeadersFrame:
			if f.StreamID != 1 {
				continue
			}
			hs, err := dec.DecodeFull(f.HeaderBlockFragment())
			if err != nil {
				t.Fatal(err)
			}
			for _, h := range hs {
				if h.Name == ":status" {
					n, err := strconv.Atoi(h.Value)
					if err != nil {
						t.Fatalf(":status %q", h.Value)
					}
					return n, 0
				}
			}
		}
	}
}
