package sshagent

import (
	"encoding/binary"
	"errors"
	"io"
)

// Message numbers of the agent protocol this agent reads or writes.
const (
	msgFailure           = 5
	msgSuccess           = 6
	msgRequestIdentities = 11
	msgIdentitiesAnswer  = 12
	msgSignRequest       = 13
	msgSignResponse      = 14
	msgExtension         = 27
)

// requestNames name the requests the agent refuses, for its reports.
var requestNames = map[byte]string{
	1: "list protocol 1 keys", 7: "add a protocol 1 key", 8: "remove a protocol 1 key", 9: "remove all protocol 1 keys",
	17: "add a key", 18: "remove a key", 19: "remove all keys", 20: "add a smartcard key", 21: "remove a smartcard key",
	22: "lock the agent", 23: "unlock the agent", 25: "add a constrained key", 26: "add a constrained smartcard key",
}

// maxMessage bounds a request (OpenSSH's agent takes up to 256 KiB; a
// user authentication request to sign is a few KiB at most).
const maxMessage = 64 << 10

// errMalformed is any request that does not parse.
var errMalformed = errors.New("malformed")

// readMessage reads one length-prefixed message of 1 to maxMessage bytes.
func readMessage(r io.Reader) ([]byte, error) {
	var n [4]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return nil, err
	}
	size := binary.BigEndian.Uint32(n[:])
	if size == 0 || size > maxMessage {
		return nil, errTooLarge
	}
	msg := make([]byte, size)
	if _, err := io.ReadFull(r, msg); err != nil {
		return nil, err
	}
	return msg, nil
}

// errTooLarge is a message length of 0 or more than maxMessage: the
// connection is closed.
var errTooLarge = errors.New("message length out of bounds")

// frame prefixes msg with its length.
func frame(msg []byte) []byte {
	out := binary.BigEndian.AppendUint32(make([]byte, 0, 4+len(msg)), uint32(len(msg)))
	return append(out, msg...)
}

// appendString appends an ssh string (uint32 length, then the bytes).
func appendString(b, s []byte) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(len(s)))
	return append(b, s...)
}

// reader reads ssh wire types from a message; after the first error every
// read fails and ok reports false.
type reader struct {
	b   []byte
	bad bool
}

func (r *reader) byte() byte {
	if r.bad || len(r.b) < 1 {
		r.bad = true
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

func (r *reader) uint32() uint32 {
	if r.bad || len(r.b) < 4 {
		r.bad = true
		return 0
	}
	v := binary.BigEndian.Uint32(r.b)
	r.b = r.b[4:]
	return v
}

// string reads an ssh string; the result aliases the message.
func (r *reader) string() []byte {
	n := r.uint32()
	if r.bad || uint64(n) > uint64(len(r.b)) {
		r.bad = true
		return nil
	}
	s := r.b[:n:n]
	r.b = r.b[n:]
	return s
}

// bool reads an ssh boolean written canonically: 0 or 1.
func (r *reader) bool() bool {
	c := r.byte()
	if c > 1 {
		r.bad = true
	}
	return c == 1
}

// end reports whether every read succeeded and nothing is left.
func (r *reader) end() bool { return !r.bad && len(r.b) == 0 }
