package fastexec

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"golang.org/x/net/http2/hpack"
)

// HTTP/2 frame types and flags (RFC 9113 §6).
const (
	frameData         = 0x0
	frameHeaders      = 0x1
	frameRSTStream    = 0x3
	frameSettings     = 0x4
	framePushPromise  = 0x5
	framePing         = 0x6
	frameGoAway       = 0x7
	frameWindowUpdate = 0x8
	frameContinuation = 0x9

	flagEndStream  = 0x1
	flagAck        = 0x1
	flagEndHeaders = 0x4
	flagPadded     = 0x8
	flagPriority   = 0x20

	settingEnablePush    = 0x2
	settingInitialWindow = 0x4
	settingMaxFrameSize  = 0x5
	settingMaxHeaderList = 0x6

	errCancel = 0x8

	// The one stream a call uses.
	streamID = 1
	// What this client announces and accepts.
	maxFrame      = 16384   // SETTINGS_MAX_FRAME_SIZE's default: never raised
	recvWindow    = 1 << 30 // the stream's and the connection's receive window
	maxHeaderList = 1 << 20 // bytes of one header block, decoded or not
	// Send windows before the server's settings say otherwise.
	defaultWindow = 65535
)

const preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

// errProtocol is a server that does not speak HTTP/2 as it must.
var errProtocol = errors.New("HTTP/2 protocol error")

// h2 is one HTTP/2 connection carrying one stream (streamID).
type h2 struct {
	r *bufio.Reader
	w io.Writer

	wmu sync.Mutex // one frame at a time

	mu         sync.Mutex // the send windows
	cond       *sync.Cond
	connWin    int64
	streamWin  int64
	initial    int64 // the server's SETTINGS_INITIAL_WINDOW_SIZE
	sendFrame  int
	peerClosed bool // the stream or connection ended: no more sending

	dec         *hpack.Decoder
	fields      []hpack.HeaderField
	block       []byte // a header block being gathered from CONTINUATION frames
	blockStream uint32 // the stream it is for
	endStream   bool   // its HEADERS ended the stream
	unacked     int64  // received DATA bytes not yet given back by WINDOW_UPDATE

	heard    atomic.Bool // a whole frame came from the server
	listSize int         // the decoded size of the header block being read
}

func newH2(r io.Reader, w io.Writer) *h2 {
	c := &h2{r: bufio.NewReaderSize(r, 32<<10), w: w, connWin: defaultWindow, streamWin: defaultWindow, initial: defaultWindow, sendFrame: maxFrame}
	c.cond = sync.NewCond(&c.mu)
	c.dec = hpack.NewDecoder(4096, func(f hpack.HeaderField) {
		// Bound the block decoded too (as SETTINGS_MAX_HEADER_LIST_SIZE
		// announces): a few bytes can name a large entry of the table.
		c.listSize += int(f.Size())
		if c.listSize > maxHeaderList {
			c.dec.SetEmitEnabled(false)
			return
		}
		c.fields = append(c.fields, f)
	})
	c.dec.SetMaxStringLength(maxHeaderList)
	return c
}

// frame writes one frame.
func (c *h2) frame(typ, flags byte, stream uint32, payload []byte) error {
	b := make([]byte, 9, 9+len(payload))
	b[0], b[1], b[2] = byte(len(payload)>>16), byte(len(payload)>>8), byte(len(payload))
	b[3], b[4] = typ, flags
	binary.BigEndian.PutUint32(b[5:], stream)
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_, err := c.w.Write(append(b, payload...))
	return err
}

// start sends the preface, this client's settings and window, and the
// request's headers.
func (c *h2) start(path, authority string) error {
	var s []byte
	for _, kv := range [][2]uint32{{settingEnablePush, 0}, {settingInitialWindow, recvWindow}, {settingMaxHeaderList, maxHeaderList}} {
		s = binary.BigEndian.AppendUint16(s, uint16(kv[0]))
		s = binary.BigEndian.AppendUint32(s, kv[1])
	}
	var hb headerBuf
	enc := hpack.NewEncoder(&hb)
	for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", path}, {":authority", authority},
		{"content-type", "application/grpc"}, {"te", "trailers"}, {"user-agent", "coily-exec"}} {
		if err := enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]}); err != nil {
			return err
		}
	}
	c.wmu.Lock()
	_, err := io.WriteString(c.w, preface)
	c.wmu.Unlock()
	if err != nil {
		return err
	}
	if err := c.frame(frameSettings, 0, 0, s); err != nil {
		return err
	}
	if err := c.frame(frameWindowUpdate, 0, 0, be32(recvWindow-defaultWindow)); err != nil {
		return err
	}
	if len(hb) > maxFrame {
		return errors.New("request headers too large")
	}
	return c.frame(frameHeaders, flagEndHeaders, streamID, hb)
}

type headerBuf []byte

func (b *headerBuf) Write(p []byte) (int, error) { *b = append(*b, p...); return len(p), nil }

func be32(v uint32) []byte { return binary.BigEndian.AppendUint32(nil, v) }

// send writes body as the stream's DATA, as the server's windows allow,
// ending the stream with the last frame.
func (c *h2) send(body []byte) error {
	for {
		c.mu.Lock()
		for !c.peerClosed && len(body) > 0 && (c.connWin <= 0 || c.streamWin <= 0) {
			c.cond.Wait()
		}
		if c.peerClosed {
			c.mu.Unlock()
			return nil // the answer came (a refusal before reading it all)
		}
		n := min(int64(len(body)), c.connWin, c.streamWin, int64(c.sendFrame))
		c.connWin -= n
		c.streamWin -= n
		c.mu.Unlock()
		var flags byte
		if int(n) == len(body) {
			flags = flagEndStream
		}
		if err := c.frame(frameData, flags, streamID, body[:n]); err != nil {
			return err
		}
		body = body[n:]
		if len(body) == 0 {
			return nil
		}
	}
}

// closeSend wakes a sender waiting for a window that will not come.
func (c *h2) closeSend() {
	c.mu.Lock()
	c.peerClosed = true
	c.mu.Unlock()
	c.cond.Broadcast()
}

// event is what one frame of the stream brought: a header block, data, or
// the stream's end.
type event struct {
	headers   []hpack.HeaderField // a complete header block
	data      []byte
	endStream bool
}

// next reads frames until one matters to the stream; connection-level
// frames (settings, pings, window updates) are answered on the way. err
// is a *StatusError for a reset stream or a server going away, io.EOF or
// another read error for a lost connection, errProtocol for a broken one.
func (c *h2) next() (event, error) {
	for {
		typ, flags, stream, p, err := c.readFrame()
		if err != nil {
			return event{}, err
		}
		if c.block != nil && typ != frameContinuation {
			return event{}, fmt.Errorf("%w: a header block not continued", errProtocol)
		}
		switch typ {
		case frameSettings:
			if err := c.settings(flags, stream, p); err != nil {
				return event{}, err
			}
		case framePing:
			if len(p) != 8 || stream != 0 {
				return event{}, fmt.Errorf("%w: a bad PING", errProtocol)
			}
			if flags&flagAck == 0 {
				if err := c.frame(framePing, flagAck, 0, p); err != nil {
					return event{}, err
				}
			}
		case frameWindowUpdate:
			if err := c.windowUpdate(stream, p); err != nil {
				return event{}, err
			}
		case frameGoAway:
			if len(p) < 8 {
				return event{}, fmt.Errorf("%w: a bad GOAWAY", errProtocol)
			}
			if binary.BigEndian.Uint32(p)&0x7fffffff < streamID {
				return event{}, &StatusError{Code: codeUnavailable, Message: "the server went away before taking the call"}
			}
		case framePushPromise:
			return event{}, fmt.Errorf("%w: a PUSH_PROMISE though push is off", errProtocol)
		case frameRSTStream:
			if stream != streamID {
				continue
			}
			if len(p) != 4 {
				return event{}, fmt.Errorf("%w: a bad RST_STREAM", errProtocol)
			}
			return event{}, resetError(binary.BigEndian.Uint32(p))
		case frameHeaders, frameContinuation:
			ev, done, err := c.headerFrame(typ, flags, stream, p)
			if err != nil || done {
				return ev, err
			}
		case frameData:
			if stream != streamID {
				continue
			}
			ev, err := c.dataFrame(flags, p)
			if err != nil || len(ev.data) > 0 || ev.endStream {
				return ev, err
			}
		}
	}
}

// readFrame reads one frame no larger than this client allows.
func (c *h2) readFrame() (typ, flags byte, stream uint32, p []byte, err error) {
	var h [9]byte
	if _, err = io.ReadFull(c.r, h[:]); err != nil {
		return 0, 0, 0, nil, err
	}
	n := int(h[0])<<16 | int(h[1])<<8 | int(h[2])
	if n > maxFrame {
		return 0, 0, 0, nil, fmt.Errorf("%w: a frame of %d bytes (at most %d)", errProtocol, n, maxFrame)
	}
	p = make([]byte, n)
	if _, err = io.ReadFull(c.r, p); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return 0, 0, 0, nil, err
	}
	c.heard.Store(true)
	return h[3], h[4], binary.BigEndian.Uint32(h[5:]) & 0x7fffffff, p, nil
}

func (c *h2) settings(flags byte, stream uint32, p []byte) error {
	if stream != 0 || len(p)%6 != 0 || flags&flagAck != 0 && len(p) != 0 {
		return fmt.Errorf("%w: a bad SETTINGS", errProtocol)
	}
	if flags&flagAck != 0 {
		return nil
	}
	for ; len(p) > 0; p = p[6:] {
		id, v := binary.BigEndian.Uint16(p), binary.BigEndian.Uint32(p[2:])
		switch id {
		case settingInitialWindow:
			if v > 1<<31-1 {
				return fmt.Errorf("%w: a window over 2^31-1", errProtocol)
			}
			c.mu.Lock()
			c.streamWin += int64(v) - c.initial
			c.initial = int64(v)
			c.mu.Unlock()
			c.cond.Broadcast()
		case settingMaxFrameSize:
			if v < 16384 || v > 1<<24-1 {
				return fmt.Errorf("%w: a bad maximum frame size", errProtocol)
			}
			c.mu.Lock()
			c.sendFrame = int(min(v, maxFrame))
			c.mu.Unlock()
		}
	}
	return c.frame(frameSettings, flagAck, 0, nil)
}

func (c *h2) windowUpdate(stream uint32, p []byte) error {
	if len(p) != 4 {
		return fmt.Errorf("%w: a bad WINDOW_UPDATE", errProtocol)
	}
	inc := int64(binary.BigEndian.Uint32(p) & 0x7fffffff)
	c.mu.Lock()
	switch stream {
	case 0:
		c.connWin += inc
	case streamID:
		c.streamWin += inc
	}
	over := c.connWin > 1<<31-1 || c.streamWin > 1<<31-1
	c.mu.Unlock()
	c.cond.Broadcast()
	if over {
		return fmt.Errorf("%w: a window over 2^31-1", errProtocol)
	}
	return nil
}

// headerFrame gathers a header block; done when it is complete and
// belongs to the stream.
func (c *h2) headerFrame(typ, flags byte, stream uint32, p []byte) (event, bool, error) {
	if typ == frameContinuation && c.block == nil {
		return event{}, false, fmt.Errorf("%w: CONTINUATION without HEADERS", errProtocol)
	}
	if typ == frameHeaders {
		var err error
		if p, err = unpad(flags, p); err != nil {
			return event{}, false, err
		}
		if flags&flagPriority != 0 {
			if len(p) < 5 {
				return event{}, false, fmt.Errorf("%w: a short HEADERS", errProtocol)
			}
			p = p[5:]
		}
		c.block = []byte{}
		c.endStream = flags&flagEndStream != 0
		c.blockStream = stream
	}
	if len(c.block)+len(p) > maxHeaderList {
		return event{}, false, fmt.Errorf("%w: a header block over %d bytes", errProtocol, maxHeaderList)
	}
	c.block = append(c.block, p...)
	if flags&flagEndHeaders == 0 {
		return event{}, false, nil
	}
	block := c.block
	c.block = nil
	c.fields, c.listSize = nil, 0
	c.dec.SetEmitEnabled(true)
	if _, err := c.dec.Write(block); err != nil {
		return event{}, false, fmt.Errorf("%w: headers: %v", errProtocol, err)
	}
	if err := c.dec.Close(); err != nil {
		return event{}, false, fmt.Errorf("%w: headers: %v", errProtocol, err)
	}
	if c.listSize > maxHeaderList {
		return event{}, false, fmt.Errorf("%w: a header list over %d bytes decoded", errProtocol, maxHeaderList)
	}
	if c.blockStream != streamID {
		return event{}, false, nil
	}
	return event{headers: c.fields, endStream: c.endStream}, true, nil
}

func (c *h2) dataFrame(flags byte, p []byte) (event, error) {
	n := int64(len(p))
	p, err := unpad(flags, p)
	if err != nil {
		return event{}, err
	}
	// Give the windows back long before they run out, so that a command's
	// output never waits for this client.
	c.unacked += n
	if c.unacked >= recvWindow/2 {
		if err := c.frame(frameWindowUpdate, 0, 0, be32(uint32(c.unacked))); err != nil {
			return event{}, err
		}
		if err := c.frame(frameWindowUpdate, 0, streamID, be32(uint32(c.unacked))); err != nil {
			return event{}, err
		}
		c.unacked = 0
	}
	return event{data: p, endStream: flags&flagEndStream != 0}, nil
}

func unpad(flags byte, p []byte) ([]byte, error) {
	if flags&flagPadded == 0 {
		return p, nil
	}
	if len(p) < 1 || int(p[0]) > len(p)-1 {
		return nil, fmt.Errorf("%w: bad padding", errProtocol)
	}
	return p[1 : len(p)-int(p[0])], nil
}

// tryReset cancels the stream with RST_STREAM if the connection is free and
// the socket takes the frame at once; it never waits (a write may be
// blocked on a server that stopped reading). Closing the connection,
// which the caller does next, cancels the call on the server anyway.
func (c *h2) tryReset(f *os.File) {
	if !c.wmu.TryLock() {
		return
	}
	defer c.wmu.Unlock()
	rst := append([]byte{0, 0, 4, frameRSTStream, 0, 0, 0, 0, streamID}, be32(errCancel)...)
	if raw, err := f.SyscallConn(); err == nil {
		_ = raw.Control(func(fd uintptr) { _ = syscall.Sendto(int(fd), rst, syscall.MSG_DONTWAIT, nil) })
	}
}

// resetError is the status of a stream the server reset, as grpc-go reads
// the HTTP/2 error code.
func resetError(code uint32) *StatusError {
	switch code {
	case 0x7: // REFUSED_STREAM: nothing was processed
		return &StatusError{Code: codeUnavailable, Message: "the server refused the stream"}
	case errCancel:
		return &StatusError{Code: codeCanceled, Message: "the server cancelled the call"}
	case 0xb: // ENHANCE_YOUR_CALM
		return &StatusError{Code: codeResourceExhausted, Message: "the server reset the call: enhance your calm"}
	}
	return &StatusError{Code: codeInternal, Message: "the server reset the call (HTTP/2 error " + strconv.FormatUint(uint64(code), 10) + ")"}
}

// header returns a field's value from a decoded block.
func header(fields []hpack.HeaderField, name string) (string, bool) {
	for _, f := range fields {
		if strings.EqualFold(f.Name, name) {
			return f.Value, true
		}
	}
	return "", false
}
