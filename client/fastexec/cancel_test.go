package fastexec

import (
	"context"
	"errors"
	"io"
	"net"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
	"time"
)

// execWithin runs Exec and fails the test if it has not returned within d.
func execWithin(t *testing.T, ctx context.Context, d time.Duration, c Call, req Request) (*Exit, error) {
	t.Helper()
	type res struct {
		exit *Exit
		err  error
	}
	done := make(chan res, 1)
	go func() {
		e, err := c.Exec(ctx, req)
		done <- res{e, err}
	}()
	select {
	case r := <-done:
		return r.exit, r.err
	case <-time.After(d):
		buf := make([]byte, 1<<16)
		n := runtime.Stack(buf, true)
		t.Fatalf("Exec did not return within %v after cancel (hang)\n%s", d, buf[:n])
		return nil, nil
	}
}

// TestCancelWhileSendBlocked: a peer that opens the windows, then stops
// reading (a wedged or SIGSTOPped server, or anything else on the socket)
// while a large stdin is sent: the sender blocks in write(2), and Ctrl-C
// must still end the call at once (found by a review: the reset waited
// for the blocked writer).
func TestCancelWhileSendBlocked(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "s")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		// Big windows, then never read again.
		s := srvFrame(frameSettings, 0, 0, []byte{0, 4, 0x7f, 0xff, 0xff, 0xff})
		wu := srvFrame(frameWindowUpdate, 0, 0, be32(1<<31-1-65535))
		_, _ = c.Write(append(s, wu...))
		time.Sleep(time.Hour)
	}()
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(500*time.Millisecond, cancel)
	_, err = execWithin(t, ctx, 5*time.Second, Call{Socket: sock, Stdout: io.Discard, Stderr: io.Discard},
		Request{Argv: []string{"cat"}, Stdin: make([]byte, 1<<20)})
	if st, ok := err.(*StatusError); !ok || st.Code != codeCanceled {
		t.Fatalf("got %v, want Canceled", err)
	}
}

// TestCancelDuringConnect: a listener whose accept queue is full (a
// wedged server) would make a blocking connect(2) wait; Ctrl-C must end
// the call.
func TestCancelDuringConnect(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "s")
	fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	if err := syscall.Bind(fd, &syscall.SockaddrUnix{Name: sock}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	// Fill the backlog (never accepted).
	for i := 0; i < 2; i++ {
		c, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := syscall.SetNonblock(c, true); err != nil {
			t.Fatal(err)
		}
		defer syscall.Close(c)
		_ = syscall.Connect(c, &syscall.SockaddrUnix{Name: sock})
	}
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(300*time.Millisecond, cancel)
	_, err = execWithin(t, ctx, 5*time.Second, Call{Socket: sock, Stdout: io.Discard, Stderr: io.Discard}, Request{Argv: []string{"true"}})
	if err == nil {
		t.Fatal("no error")
	}
}

// TestHeaderAmplification: one entry of hpack's table referenced by
// one-byte indices would decode a block under 1 MiB into ~1M fields (4
// GB of header list, 250 MB allocated): the decoded size is bounded too,
// the block refused, and little allocated.
func TestHeaderAmplification(t *testing.T) {
	var blk []byte
	// Literal with incremental indexing, new name "x", value 4000 bytes.
	blk = append(blk, 0x40, 0x01, 'x', 0x7f)
	v := 4000 - 127
	for v >= 128 {
		blk = append(blk, byte(v%128)|0x80)
		v /= 128
	}
	blk = append(blk, byte(v))
	blk = append(blk, make([]byte, 4000)...)
	for i := range 4000 {
		blk[len(blk)-4000+i] = 'a'
	}
	var frames [][]byte
	frames = append(frames, settings)
	first := true
	for len(blk) < maxHeaderList-maxFrame {
		chunk := make([]byte, maxFrame)
		for i := range chunk {
			chunk[i] = 0xbe // indexed field 62: the entry above
		}
		if first {
			chunk = append(blk, chunk[:maxFrame-len(blk)]...)
			frames = append(frames, srvFrame(frameHeaders, 0, 1, chunk))
			first = false
		} else {
			frames = append(frames, srvFrame(frameContinuation, 0, 1, chunk))
		}
		blk = append(blk, chunk...)
	}
	frames = append(frames, srvFrame(frameContinuation, flagEndHeaders, 1, nil))
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	h := newH2(bytesReader(cat(frames...)), io.Discard)
	ev, err := h.next()
	runtime.ReadMemStats(&after)
	decoded := 0
	for _, f := range ev.headers {
		decoded += len(f.Name) + len(f.Value) + 32
	}
	if !errors.Is(err, errProtocol) || decoded > maxHeaderList {
		t.Errorf("a %d KiB block decoding to %d bytes: %v", len(blk)>>10, decoded, err)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 32<<20 {
		t.Errorf("decoding the block allocated %d MB", alloc>>20)
	}
}

func bytesReader(b []byte) io.Reader { return &sliceReader{b} }

type sliceReader struct{ b []byte }

func (r *sliceReader) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		return 0, io.EOF
	}
	n := copy(p, r.b)
	r.b = r.b[n:]
	return n, nil
}
