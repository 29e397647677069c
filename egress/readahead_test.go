package egress

import (
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// sizedReader hands out data in reads of the sizes it is given, in turn,
// then err (io.EOF if nil), counting what it handed out.
type sizedReader struct {
	data  []byte
	sizes []int
	i     int
	err   error
	read  atomic.Int64
	shut  atomic.Bool
}

func (r *sizedReader) Read(p []byte) (int, error) {
	if len(r.data) == 0 {
		if r.err != nil {
			return 0, r.err
		}
		return 0, io.EOF
	}
	k := min(len(p), len(r.data), r.sizes[r.i%len(r.sizes)])
	r.i++
	n := copy(p, r.data[:k])
	r.data = r.data[n:]
	r.read.Add(int64(n))
	return n, nil
}

func (r *sizedReader) Close() error { r.shut.Store(true); return nil }

// TestReadAheadPassesTheBodyOn: whatever the body's size, the upstream's
// read sizes and the writer's, what comes out is the body, in order,
// then its error; a body under aheadAfter starts no goroutine; flush is
// called before a read that may wait.
func TestReadAheadPassesTheBodyOn(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, size := range []int{0, 1, 5000, aheadAfter - 1, aheadAfter, aheadAfter + 1, 3 << 20} {
		data := make([]byte, size)
		for i := range data {
			data[i] = byte(rng.IntN(256))
		}
		for _, sizes := range [][]int{{1 << 20}, {16 << 10}, {1, 7, 16 << 10, 3}} {
			for _, how := range []string{"WriteTo", "Read 1000", "Read 64K", "Read to the start, then WriteTo"} {
				for _, tail := range []error{nil, errors.New("upstream cut")} {
					src := &sizedReader{data: data, sizes: sizes, err: tail}
					flushes := 0
					a := newReadAhead(src, func() error { flushes++; return nil })
					var out bytes.Buffer
					var err error
					switch how {
					case "WriteTo":
						_, err = a.WriteTo(&out)
					case "Read to the start, then WriteTo": // net/http with a Content-Length
						if _, err = io.CopyN(&out, struct{ io.Reader }{a}, int64(min(size, aheadAfter))); err == nil {
							_, err = a.WriteTo(&out)
						}
					case "Read 1000":
						_, err = io.CopyBuffer(&out, struct{ io.Reader }{a}, make([]byte, 1000))
					default:
						_, err = io.CopyBuffer(&out, struct{ io.Reader }{a}, make([]byte, 64<<10))
					}
					a.Close()
					name := func() string { return fmt.Sprintf("%s of %d bytes in reads of %v, then %v", how, size, sizes, tail) }
					if !bytes.Equal(out.Bytes(), data) {
						t.Fatalf("%s: %d bytes out, not the body", name(), out.Len())
					}
					if (tail == nil) != (err == nil) || (tail != nil && !errors.Is(err, tail)) {
						t.Errorf("%s: error %v, want %v", name(), err, tail)
					}
					if a.started != (size >= aheadAfter) {
						t.Errorf("%s: read ahead %v, want %v", name(), a.started, size >= aheadAfter)
					}
					if flushes == 0 {
						t.Errorf("%s: never flushed", name())
					}
					if !src.shut.Load() {
						t.Errorf("%s: the body was not closed", name())
					}
				}
			}
		}
	}
}

// blockingBody hands out n bytes, then blocks in Read until closed.
type blockingBody struct {
	left   int
	closed chan struct{}
	read   atomic.Int64
}

func (b *blockingBody) Read(p []byte) (int, error) {
	if b.left > 0 {
		k := min(len(p), b.left)
		b.left -= k
		b.read.Add(int64(k))
		return k, nil
	}
	<-b.closed
	return 0, errors.New("closed")
}

func (b *blockingBody) Close() error { close(b.closed); return nil }

// TestReadAheadBoundedAndStoppable: a writer that stops taking leaves at
// most aheadBufs buffers read ahead of it, and Close ends the goroutine
// even while the body's Read waits.
func TestReadAheadBoundedAndStoppable(t *testing.T) {
	body := &blockingBody{left: 64 << 20, closed: make(chan struct{})}
	a := newReadAhead(body, nil)
	p := make([]byte, 4096)
	var handed int64
	for handed <= aheadAfter {
		n, err := a.Read(p)
		if err != nil {
			t.Fatal(err)
		}
		handed += int64(n)
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(a.full) < aheadBufs-1 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond) // poll: the goroutine fills the buffers
	}
	limit := handed + int64(aheadBufs+1)*aheadSize
	if got := body.read.Load(); got > limit || len(a.full) < aheadBufs-1 {
		t.Fatalf("read %d bytes of the body with %d handed out (limit %d), %d chunks ready", got, handed, limit, len(a.full))
	}
	// Now the body's Read blocks (no more data past what it gave): Close
	// must still return.
	body2 := &blockingBody{left: aheadAfter + 1, closed: make(chan struct{})}
	b := newReadAhead(body2, nil)
	if _, err := io.CopyN(io.Discard, struct{ io.Reader }{b}, aheadAfter+1); err != nil {
		t.Fatal(err)
	}
	closed := make(chan struct{})
	go func() { a.Close(); b.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return while the body's Read waited")
	}
	if _, err := b.Read(p); err == nil {
		t.Error("a read after Close handed out data")
	}
}

// TestInspectCutResponseEndsTheConnection: when the upstream's response
// breaks off mid-body, the proxy closes the child's connection rather
// than answer a pipelined next request on it, which the child would
// read as the rest of the first body.
func TestInspectCutResponseEndsTheConnection(t *testing.T) {
	for _, size := range []int{1000, aheadAfter + 5000} {
		e := newInspectEnvHandler(t, func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/cut" {
				io.WriteString(w, "second")
				return
			}
			io.WriteString(w, strings.Repeat("c", size))
			w.(http.Flusher).Flush()
			panic(http.ErrAbortHandler) // the connection drops: no last chunk
		}, nil, 0, FormBearer, -1)
		host := otherHost + ":" + e.port
		_, _, c := e.tp.raw(t, connect(host))
		tc := tls.Client(c, &tls.Config{ServerName: otherHost, RootCAs: caPool(e.ca), NextProtos: []string{"http/1.1"}})
		fmt.Fprintf(tc, "GET /cut HTTP/1.1\r\nHost: %s\r\n\r\nGET /next HTTP/1.1\r\nHost: %s\r\n\r\n", host, host)
		tc.SetReadDeadline(time.Now().Add(20 * time.Second))
		got, err := io.ReadAll(tc)
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			t.Fatalf("%d bytes: the connection stayed open after a cut response (%d responses read)", size, bytes.Count(got, []byte("HTTP/1.1 ")))
		}
		if n := bytes.Count(got, []byte("HTTP/1.1 ")); n != 1 || bytes.Contains(got, []byte("second")) {
			t.Errorf("%d bytes: %d responses on the connection after a cut one (%q...)", size, n, got[:min(len(got), 200)])
		}
	}
}

// TestInspectLengthsAroundTheReadAheadStart: responses that say their
// length, around where the read-ahead starts, from a host with an
// injection (scrubbed, chunked) and one without (Content-Length kept),
// come through whole on one kept-alive connection.
func TestInspectLengthsAroundTheReadAheadStart(t *testing.T) {
	e := newInspectEnvHandler(t, func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(r.URL.Query().Get("n"))
		w.Header().Set("Content-Length", strconv.Itoa(n))
		io.Copy(w, io.LimitReader(zeros{}, int64(n)))
	}, nil, 0, FormBearer, -1)
	cl := keepAlive(t, e.client(t, caPool(e.ca), false))
	for host, auth := range map[string]string{otherHost: "", apiHost: "Bearer " + e.placeholder} {
		for _, n := range []int{aheadAfter - 1, aheadAfter, aheadAfter + 1, aheadAfter + aheadSize} {
			resp, body := do(t, cl, "GET", e.url(host, "/repos/alice/app?n="+strconv.Itoa(n)), auth, "")
			if resp.StatusCode != 200 || len(body) != n {
				t.Errorf("%s, %d bytes: %s with %d bytes", host, n, resp.Status, len(body))
			}
		}
	}
}
