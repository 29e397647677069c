package egress

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
	"time"
)

// checkHeadCases are request heads as a child could write them, and
// whether checkHead lets them through to the parser.
var checkHeadCases = []struct {
	name, head string
	ok         bool
}{
	{"plain", "GET / HTTP/1.1\r\nHost: a\r\n\r\n", true},
	{"with a body length", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\nabc", true},
	{"chunked", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", true},
	{"chunked any case", "POST / HTTP/1.1\r\nHost: a\r\ntransfer-encoding: Chunked \r\n\r\n0\r\n\r\n", true},
	{"two pipelined", "GET /1 HTTP/1.1\r\nHost: a\r\n\r\nGET /2 HTTP/1.1\r\nHost: a\r\n\r\n", true},
	{"CL and TE", "POST / HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n", false},
	{"TE and CL", "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n", false},
	{"two CL", "POST / HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\n", false},
	{"two TE", "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n", false},
	{"TE not chunked", "POST / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", false},
	{"TE identity", "POST / HTTP/1.1\r\nTransfer-Encoding: identity\r\n\r\n", false},
	{"folded line", "GET / HTTP/1.1\r\nHost: a\r\n b\r\n\r\n", false},
	{"folded by a tab", "GET / HTTP/1.1\r\nX: a\r\n\tContent-Length: 3\r\n\r\n", false},
	{"bare LF", "GET / HTTP/1.1\r\nHost: a\nContent-Length: 3\r\n\r\n", false},
	{"bare CR", "GET / HTTP/1.1\r\nHost: a\rX: b\r\n\r\n", false},
	{"space before the colon", "POST / HTTP/1.1\r\nContent-Length : 3\r\n\r\n", false},
	{"tab in the name", "POST / HTTP/1.1\r\nTransfer-Encoding\t: chunked\r\n\r\n", false},
	{"no colon", "GET / HTTP/1.1\r\nHost a\r\n\r\n", false},
	{"empty name", "GET / HTTP/1.1\r\n: a\r\n\r\n", false},
	{"a TLS ClientHello", "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", false},
	{"an HTTP/2 preface", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", true}, // a request line: refused later (not origin-form)
	{"binary", "\x00\x01GET / HTTP/1.1\r\n\r\n", false},
	{"cut short", "GET / HTTP/1.1\r\nHost: a\r\n", false},
	{"too long", "GET / HTTP/1.1\r\nX: " + strings.Repeat("a", maxHeaderBytes) + "\r\n\r\n", false},
}

// TestCheckHead: what checkHead lets through and refuses, read at once
// and a byte at a time, and that it consumes nothing.
func TestCheckHead(t *testing.T) {
	for _, c := range checkHeadCases {
		for _, slow := range []bool{false, true} {
			var r io.Reader = strings.NewReader(c.head)
			if slow {
				r = iotest.OneByteReader(r)
			}
			br := bufio.NewReaderSize(r, maxHeaderBytes+4096)
			err := checkHead(br)
			if (err == nil) != c.ok {
				t.Errorf("%s (slow %v): %v; want ok %v", c.name, slow, err, c.ok)
			}
			if rest, _ := io.ReadAll(br); string(rest) != c.head {
				t.Errorf("%s (slow %v): %q left to read; want all of it", c.name, slow, rest)
			}
		}
	}
	if err := checkHead(bufio.NewReader(strings.NewReader(""))); !errors.Is(err, io.EOF) {
		t.Errorf("nothing: %v; want io.EOF", err)
	}
}

// TestCheckHeadBuffered: a head already buffered is checked without
// reading more (a pipelining client sends nothing until answered).
func TestCheckHeadBuffered(t *testing.T) {
	block := make(chan struct{})
	defer close(block)
	r := io.MultiReader(strings.NewReader("GET /1 HTTP/1.1\r\nHost: a\r\n\r\nGET /2 HTTP/1.1\r\nHost: a\r\n\r\n"), blockingReader(block))
	br := bufio.NewReaderSize(r, maxHeaderBytes+4096)
	done := make(chan error, 1)
	go func() {
		if err := checkHead(br); err != nil {
			done <- err
			return
		}
		br.Discard(len("GET /1 HTTP/1.1\r\nHost: a\r\n\r\n")) // the first request read
		done <- checkHead(br)
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("checkHead waited for more bytes with the second head buffered")
	}
}

// blockingReader blocks every Read until done is closed, then says EOF.
type blockingReader chan struct{}

func (b blockingReader) Read([]byte) (int, error) { <-b; return 0, io.EOF }

// FuzzCheckHead: checkHead never consumes, answers the same read at once
// or a byte at a time, and what it lets through has one framing: a
// method first, at most one Content-Length or one chunked
// Transfer-Encoding, no bare CR or LF and no folded lines in its head.
func FuzzCheckHead(f *testing.F) {
	for _, c := range checkHeadCases {
		f.Add([]byte(c.head))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		br := bufio.NewReaderSize(bytes.NewReader(data), maxHeaderBytes+4096)
		err := checkHead(br)
		slow := checkHead(bufio.NewReaderSize(iotest.OneByteReader(bytes.NewReader(data)), maxHeaderBytes+4096))
		if (err == nil) != (slow == nil) {
			t.Fatalf("%q: at once %v, a byte at a time %v", data, err, slow)
		}
		if rest, _ := io.ReadAll(br); !bytes.Equal(rest, data) {
			t.Fatalf("%q: consumed", data)
		}
		if err != nil {
			return
		}
		i := bytes.Index(data, []byte("\r\n\r\n"))
		if i < 0 || !methodStart(data[:1]) || data[0] == ' ' {
			t.Fatalf("%q: let through without a head", data)
		}
		if i+4 > maxHeaderBytes {
			t.Fatalf("a head of %d bytes let through", i+4)
		}
		head := string(data[:i+2])
		lines := strings.Split(head, "\r\n")
		if strings.ContainsAny(lines[0], "\r\n") {
			t.Fatalf("%q: let through request line %q", data, lines[0])
		}
		var cl, te int
		for _, l := range lines[1 : len(lines)-1] {
			if strings.ContainsAny(l, "\r\n") || l == "" || l[0] == ' ' || l[0] == '\t' {
				t.Fatalf("%q: let through line %q", data, l)
			}
			name, val, _ := strings.Cut(l, ":")
			switch strings.ToLower(name) {
			case "content-length":
				cl++
			case "transfer-encoding":
				te++
				if !strings.EqualFold(strings.TrimSpace(val), "chunked") {
					t.Fatalf("%q: let through Transfer-Encoding %q", data, val)
				}
			}
		}
		if cl+te > 1 {
			t.Fatalf("%q: let through %d Content-Length and %d Transfer-Encoding", data, cl, te)
		}
	})
}
