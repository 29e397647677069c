package egress

import (
	"errors"
	"fmt"
)

// The TLS framing parseClientHello reads (RFC 8446 §5.1, §4.1.2; RFC 6066 §3).
const (
	recordTypeHandshake  = 0x16
	recordTypeAlert      = 0x15
	handshakeClientHello = 0x01
	extensionServerName  = 0x0000
	serverNameTypeHost   = 0x00
	recordHeaderLen      = 5
	maxRecordPlaintext   = 1 << 14
	maxSessionIDLen      = 32
	handshakeHeaderLen   = 4
)

// maxHelloBytes bounds what the proxy reads before deciding: the
// ClientHello with every record header that carries it.
const maxHelloBytes = 16 << 10

var (
	// errHelloShort: b is a valid beginning of a ClientHello; more bytes
	// are needed.
	errHelloShort = errors.New("egress: ClientHello incomplete")
	// errHelloBad is wrapped by every error about a malformed hello.
	errHelloBad = errors.New("egress: malformed TLS ClientHello")
	// errHelloECH: the hello offers Encrypted Client Hello. Its outer
	// server_name is a public name the proxy would check while the server
	// answers the encrypted inner one, so the CONNECT host could not be
	// enforced. A decoy ("GREASE") ECH cannot be told from a real one.
	errHelloECH = errors.New("egress: the TLS ClientHello offers Encrypted Client Hello (ECH)")
)

// parseClientHello reads the TLS handshake records at the start of b and,
// once they carry a whole ClientHello, returns its server_name host name
// ("" when the hello has none). It returns errHelloShort while b is a
// proper prefix of a ClientHello of at most maxHelloBytes, and an error
// wrapping errHelloBad as soon as b cannot start one. Bytes after the
// records that complete the hello are not looked at. The name is returned
// as sent (not lower-cased, not checked as a DNS name).
func parseClientHello(b []byte) (string, error) {
	msg, err := reassembleHandshake(b)
	if err != nil {
		return "", err
	}
	return parseHelloBody(cursor(msg[handshakeHeaderLen:]))
}

// reassembleHandshake concatenates the fragments of consecutive handshake
// records until they hold one whole handshake message, which must be a
// ClientHello; it returns that message, header included.
func reassembleHandshake(b []byte) ([]byte, error) {
	var msg []byte
	for off := 0; ; {
		if off+recordHeaderLen >= maxHelloBytes {
			return nil, fmt.Errorf("%w: longer than %d bytes", errHelloBad, maxHelloBytes)
		}
		if len(b)-off < recordHeaderLen {
			return nil, errHelloShort
		}
		typ, major := b[off], b[off+1]
		n := int(b[off+3])<<8 | int(b[off+4])
		switch {
		case typ != recordTypeHandshake:
			return nil, fmt.Errorf("%w: record type 0x%02x before the hello was complete", errHelloBad, typ)
		case major != 3:
			return nil, fmt.Errorf("%w: record version 0x%02x%02x", errHelloBad, major, b[off+2])
		case n == 0 || n > maxRecordPlaintext:
			return nil, fmt.Errorf("%w: record length %d", errHelloBad, n)
		case off+recordHeaderLen+n > maxHelloBytes:
			return nil, fmt.Errorf("%w: longer than %d bytes", errHelloBad, maxHelloBytes)
		}
		off += recordHeaderLen
		if len(b)-off < n {
			return nil, errHelloShort
		}
		msg = append(msg, b[off:off+n]...)
		off += n
		if len(msg) < handshakeHeaderLen {
			continue
		}
		if msg[0] != handshakeClientHello {
			return nil, fmt.Errorf("%w: handshake type %d, not ClientHello", errHelloBad, msg[0])
		}
		total := handshakeHeaderLen + (int(msg[1])<<16 | int(msg[2])<<8 | int(msg[3]))
		if total > maxHelloBytes {
			return nil, fmt.Errorf("%w: ClientHello of %d bytes, over %d", errHelloBad, total, maxHelloBytes)
		}
		if len(msg) >= total {
			return msg[:total], nil
		}
	}
}

// parseHelloBody parses a ClientHello body; it must be consumed exactly.
func parseHelloBody(c cursor) (string, error) {
	bad := func(what string) (string, error) {
		return "", fmt.Errorf("%w: %s", errHelloBad, what)
	}
	if _, ok := c.take(2 + 32); !ok { // legacy_version, random
		return bad("truncated before the session id")
	}
	if sid, ok := c.vec8(); !ok || len(sid) > maxSessionIDLen {
		return bad("session id")
	}
	if cs, ok := c.vec16(); !ok || len(cs) < 2 || len(cs)%2 != 0 {
		return bad("cipher suites")
	}
	if cm, ok := c.vec8(); !ok || len(cm) < 1 {
		return bad("compression methods")
	}
	if len(c) == 0 {
		return "", nil // no extensions at all (TLS 1.2 and before)
	}
	exts, ok := c.vec16()
	if !ok || len(c) != 0 {
		return bad("extensions length")
	}
	return serverNameOf(exts)
}

// extensionECH is encrypted_client_hello (RFC 9849).
const extensionECH = 0xfe0d

// serverNameOf finds the server_name extension in an extension block; two
// of them are refused, as they are by crypto/tls.
func serverNameOf(exts cursor) (string, error) {
	name, seen := "", false
	for len(exts) > 0 {
		typ, ok1 := exts.u16()
		data, ok2 := exts.vec16()
		if !ok1 || !ok2 {
			return "", fmt.Errorf("%w: extension truncated", errHelloBad)
		}
		if typ == extensionECH {
			return "", errHelloECH
		}
		if typ != extensionServerName {
			continue
		}
		if seen {
			return "", fmt.Errorf("%w: two server_name extensions", errHelloBad)
		}
		seen = true
		var err error
		if name, err = hostNameOf(data); err != nil {
			return "", err
		}
	}
	return name, nil
}

// hostNameOf parses a ServerNameList (RFC 6066 §3): entries of other name
// types are skipped, two host_name entries are refused, and the list
// must fill the extension exactly.
func hostNameOf(data cursor) (string, error) {
	list, ok := data.vec16()
	if !ok || len(data) != 0 || len(list) == 0 {
		return "", fmt.Errorf("%w: server_name list length", errHelloBad)
	}
	name := ""
	for len(list) > 0 {
		typ, ok1 := list.u8()
		n, ok2 := list.vec16()
		if !ok1 || !ok2 || len(n) == 0 {
			return "", fmt.Errorf("%w: server_name entry", errHelloBad)
		}
		if typ != serverNameTypeHost {
			continue
		}
		if name != "" {
			return "", fmt.Errorf("%w: two host names in server_name", errHelloBad)
		}
		name = string(n)
	}
	return name, nil
}

// cursor reads big-endian fields from the front of a byte slice; every
// read checks the length first and leaves the cursor unchanged on failure.
type cursor []byte

func (c *cursor) take(n int) ([]byte, bool) {
	if n < 0 || len(*c) < n {
		return nil, false
	}
	b := (*c)[:n]
	*c = (*c)[n:]
	return b, true
}

func (c *cursor) u8() (int, bool) {
	b, ok := c.take(1)
	if !ok {
		return 0, false
	}
	return int(b[0]), true
}

func (c *cursor) u16() (int, bool) {
	b, ok := c.take(2)
	if !ok {
		return 0, false
	}
	return int(b[0])<<8 | int(b[1]), true
}

// vec8 and vec16 read a vector with a 1- or 2-byte length prefix.
func (c *cursor) vec8() (cursor, bool)  { return c.vec(1) }
func (c *cursor) vec16() (cursor, bool) { return c.vec(2) }

func (c *cursor) vec(prefix int) (cursor, bool) {
	save := *c
	var n int
	var ok bool
	if prefix == 1 {
		n, ok = c.u8()
	} else {
		n, ok = c.u16()
	}
	if !ok {
		return nil, false
	}
	b, ok := c.take(n)
	if !ok {
		*c = save
		return nil, false
	}
	return cursor(b), true
}
