package egress

import (
	"errors"
	"io"
	"sync"
)

// readAhead passes on a response body. Its first aheadAfter bytes are
// read in the caller's goroutine, flushing what was written before each
// read that may wait (a small response pays for no goroutine); past
// them the body is read in a goroutine of its own, up to aheadBufs
// buffers ahead of the writer, so that the upstream leg's decryption
// and the scrubbing run on one core while the client leg's encryption
// runs on another (one goroutine did both in turn). Memory is bounded
// by aheadBufs buffers of aheadSize bytes per response.
type readAhead struct {
	r      io.ReadCloser
	flush  func() error
	passed int64 // handed out before the goroutine started

	started bool
	full    chan aheadChunk
	free    chan []byte
	made    int // buffers made, by the goroutine
	stop    chan struct{}
	once    sync.Once
	done    chan struct{} // closed when the goroutine has ended
	cur     aheadChunk    // the chunk being handed out, from off on
	off     int
	ended   error // the error after the last chunk, once received
}

type aheadChunk struct {
	b   []byte
	err error
}

const (
	aheadAfter = 256 << 10
	aheadBufs  = 16
	aheadSize  = 32 << 10
)

// newReadAhead passes on r; flush, if not nil, is called before a read
// that may wait, so that what was written goes out first.
func newReadAhead(r io.ReadCloser, flush func() error) *readAhead {
	return &readAhead{r: r, flush: flush}
}

func (a *readAhead) doFlush() error {
	if a.flush == nil {
		return nil
	}
	return a.flush()
}

// start hands the reading to a goroutine.
func (a *readAhead) start() {
	a.started = true
	a.full = make(chan aheadChunk, aheadBufs)
	a.free = make(chan []byte, aheadBufs)
	a.stop, a.done = make(chan struct{}), make(chan struct{})
	go a.fill()
}

func (a *readAhead) fill() {
	defer close(a.done)
	defer close(a.full)
	for {
		b, ok := a.buffer()
		if !ok {
			return
		}
		n, err := a.r.Read(b)
		select {
		case a.full <- aheadChunk{b: b[:n], err: err}:
		case <-a.stop:
			return
		}
		if err != nil {
			return
		}
	}
}

// buffer is a free buffer, or a new one while fewer than aheadBufs
// were made; false once Close was called.
func (a *readAhead) buffer() ([]byte, bool) {
	select {
	case b := <-a.free:
		return b, true
	default:
	}
	if a.made < aheadBufs {
		a.made++
		return make([]byte, aheadSize), true
	}
	select {
	case b := <-a.free:
		return b, true
	case <-a.stop:
		return nil, false
	}
}

// Read hands out the body in order, then its error.
func (a *readAhead) Read(p []byte) (int, error) {
	if !a.started && a.passed < aheadAfter {
		if err := a.doFlush(); err != nil {
			return 0, err
		}
		n, err := a.r.Read(p)
		a.passed += int64(n)
		return n, err
	}
	if err := a.next(); err != nil {
		return 0, err
	}
	n := copy(p, a.cur.b[a.off:])
	a.off += n
	return n, nil
}

// WriteTo writes the body to w, past its first bytes without copying
// it out first (io.Copy uses it, as net/http's chunked body does).
func (a *readAhead) WriteTo(w io.Writer) (int64, error) {
	var n int64
	if !a.started && a.passed < aheadAfter {
		buf := make([]byte, aheadSize)
		for a.passed < aheadAfter {
			k, err := a.Read(buf)
			if k > 0 {
				k, werr := w.Write(buf[:k])
				if n += int64(k); werr != nil {
					return n, werr
				}
			}
			if errors.Is(err, io.EOF) {
				return n, nil
			} else if err != nil {
				return n, err
			}
		}
	}
	for {
		if err := a.next(); errors.Is(err, io.EOF) {
			return n, nil
		} else if err != nil {
			return n, err
		}
		k, err := w.Write(a.cur.b[a.off:])
		n += int64(k)
		a.off += k
		if err != nil {
			return n, err
		}
	}
}

// next makes cur a chunk with bytes left to hand out, waiting for one
// (after a flush) when none is ready; once every chunk is handed out it
// returns the body's error.
func (a *readAhead) next() error {
	if !a.started { // past aheadAfter: Read or WriteTo may come first
		a.start()
	}
	for a.off == len(a.cur.b) {
		if a.ended != nil {
			return a.ended
		}
		if a.cur.b != nil {
			a.free <- a.cur.b[:cap(a.cur.b)]
		}
		var c aheadChunk
		var ok bool
		select {
		case c, ok = <-a.full:
		default:
			if err := a.doFlush(); err != nil {
				return err
			}
			c, ok = <-a.full
		}
		if !ok { // Close was called
			return io.ErrClosedPipe
		}
		a.cur, a.off, a.ended = c, 0, c.err
	}
	return nil
}

// Close closes the body and, once started, stops the goroutine; it
// returns when the goroutine has ended.
func (a *readAhead) Close() error {
	err := a.r.Close()
	if a.started {
		a.once.Do(func() { close(a.stop) })
		<-a.done
	}
	return err
}
