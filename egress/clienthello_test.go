package egress

import (
	"bytes"
	"crypto/ecdh"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// Builders of hostile ClientHellos, byte by byte.

func u16(n int) []byte { return []byte{byte(n >> 8), byte(n)} }

func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

func vec16(parts ...[]byte) []byte { b := cat(parts...); return cat(u16(len(b)), b) }

func ext(typ int, data []byte) []byte { return cat(u16(typ), vec16(data)) }

// hostEntry is one ServerNameList entry.
func hostEntry(typ byte, name string) []byte { return cat([]byte{typ}, vec16([]byte(name))) }

// sniExt is a server_name extension holding entries.
func sniExt(entries ...[]byte) []byte { return ext(0, vec16(entries...)) }

// helloBody is a minimal well-formed ClientHello body before the extensions.
func helloBody() []byte {
	return cat([]byte{3, 3}, make([]byte, 32), []byte{0}, vec16([]byte{0x13, 0x01}), []byte{1, 0})
}

// hello is a ClientHello handshake message whose body is helloBody
// followed by the extension block made of exts (none at all when exts is nil).
func hello(exts ...[]byte) []byte {
	body := helloBody()
	if exts != nil {
		body = cat(body, vec16(exts...))
	}
	return handshake(1, body)
}

func handshake(typ byte, body []byte) []byte {
	n := len(body)
	return cat([]byte{typ, byte(n >> 16), byte(n >> 8), byte(n)}, body)
}

// records frames msg as handshake records of at most size bytes each.
func records(msg []byte, size int) []byte {
	var out []byte
	for len(msg) > 0 {
		n := min(size, len(msg))
		out = append(out, record(recordTypeHandshake, msg[:n])...)
		msg = msg[n:]
	}
	return out
}

func record(typ byte, frag []byte) []byte { return cat([]byte{typ, 3, 1}, u16(len(frag)), frag) }

func withSNI(name string) []byte { return records(hello(sniExt(hostEntry(0, name))), 1<<14) }

type helloWant int

const (
	wantOK helloWant = iota
	wantShort
	wantBad
	wantECH
)

type helloCase struct {
	name  string
	in    []byte
	want  helloWant
	sni   string
	cause string // a word the error must contain
}

func helloCases() []helloCase {
	alpn := ext(16, vec16([]byte{2}, []byte("h2")))
	good := hello(alpn, sniExt(hostEntry(0, "example.com")))
	big := hello(ext(21, make([]byte, maxHelloBytes)), sniExt(hostEntry(0, "example.com")))
	atLimit := hello(ext(21, make([]byte, maxHelloBytes-recordHeaderLen-len(hello(ext(21, nil))))))
	mid := hello(ext(21, make([]byte, 10000)))
	hugeLen := []byte{recordTypeHandshake, 3, 1, 0, 4, 1, 0xff, 0xff, 0xff}
	return []helloCase{
		{name: "sni", in: records(good, 1<<14), sni: "example.com"},
		{name: "no extensions", in: records(hello(), 1<<14)},
		{name: "extensions without sni", in: records(hello(alpn), 1<<14)},
		{name: "empty extension block", in: records(hello([]byte{}), 1<<14)},
		{name: "upper case kept", in: withSNI("EXAMPLE.Com"), sni: "EXAMPLE.Com"},
		{name: "trailing dot kept", in: withSNI("example.com."), sni: "example.com."},
		{name: "NUL kept", in: withSNI("example.com\x00.evil.test"), sni: "example.com\x00.evil.test"},
		{name: "other name type skipped", in: records(hello(sniExt(hostEntry(1, "x"), hostEntry(0, "a.test"))), 1<<14), sni: "a.test"},
		{name: "only other name types", in: records(hello(sniExt(hostEntry(7, "a.test"))), 1<<14)},
		{name: "two host names", in: records(hello(sniExt(hostEntry(0, "a.test"), hostEntry(0, "b.test"))), 1<<14), want: wantBad, cause: "two host names"},
		{name: "ech after sni", in: records(hello(sniExt(hostEntry(0, "example.com")), ext(extensionECH, []byte{0, 1, 2})), 1<<14), want: wantECH},
		{name: "ech before sni", in: records(hello(ext(extensionECH, []byte{0}), sniExt(hostEntry(0, "example.com"))), 1<<14), want: wantECH},
		{name: "ech alone, empty", in: records(hello(ext(extensionECH, nil)), 1<<14), want: wantECH},
		{name: "two sni extensions", in: records(hello(sniExt(hostEntry(0, "a.test")), sniExt(hostEntry(0, "a.test"))), 1<<14), want: wantBad, cause: "two server_name"},
		{name: "empty host name", in: withSNI(""), want: wantBad, cause: "entry"},
		{name: "empty name list", in: records(hello(ext(0, vec16())), 1<<14), want: wantBad, cause: "list"},
		{name: "empty sni extension", in: records(hello(ext(0, nil)), 1<<14), want: wantBad, cause: "list"},
		{name: "name length past list", in: records(hello(ext(0, vec16([]byte{0, 0, 9}, []byte("a.test")))), 1<<14), want: wantBad, cause: "entry"},
		{name: "list shorter than extension", in: records(hello(ext(0, cat(vec16(hostEntry(0, "a.test")), []byte{0}))), 1<<14), want: wantBad, cause: "list"},
		{name: "list length past extension", in: records(hello(ext(0, cat(u16(200), hostEntry(0, "a.test")))), 1<<14), want: wantBad, cause: "list"},
		{name: "extension length past block", in: records(hello(cat(u16(0), u16(300), hostEntry(0, "a.test"))), 1<<14), want: wantBad, cause: "extension truncated"},
		{name: "block length past hello", in: records(handshake(1, cat(helloBody(), u16(500), sniExt(hostEntry(0, "a.test")))), 1<<14), want: wantBad, cause: "extensions length"},
		{name: "junk after extensions", in: records(handshake(1, cat(helloBody(), vec16(sniExt(hostEntry(0, "a.test"))), []byte{0})), 1<<14), want: wantBad, cause: "extensions length"},
		{name: "one byte of extension block", in: records(handshake(1, cat(helloBody(), []byte{0})), 1<<14), want: wantBad, cause: "extensions length"},
		{name: "session id too long", in: records(handshake(1, cat([]byte{3, 3}, make([]byte, 32), []byte{33}, make([]byte, 33), vec16([]byte{0x13, 1}), []byte{1, 0})), 1<<14), want: wantBad, cause: "session id"},
		{name: "odd cipher suites", in: records(handshake(1, cat([]byte{3, 3}, make([]byte, 32), []byte{0}, vec16([]byte{0x13}), []byte{1, 0})), 1<<14), want: wantBad, cause: "cipher"},
		{name: "no cipher suites", in: records(handshake(1, cat([]byte{3, 3}, make([]byte, 32), []byte{0}, vec16(), []byte{1, 0})), 1<<14), want: wantBad, cause: "cipher"},
		{name: "no compression", in: records(handshake(1, cat([]byte{3, 3}, make([]byte, 32), []byte{0}, vec16([]byte{0x13, 1}), []byte{0})), 1<<14), want: wantBad, cause: "compression"},
		{name: "truncated body", in: records(handshake(1, []byte{3, 3, 0}), 1<<14), want: wantBad, cause: "session id"},
		{name: "empty input", in: nil, want: wantShort},
		{name: "record header only", in: []byte{recordTypeHandshake, 3, 1, 0, 50}, want: wantShort},
		{name: "partial record header", in: []byte{recordTypeHandshake, 3, 1, 0}, want: wantShort},
		{name: "truncated record", in: records(good, 1<<14)[:40], want: wantShort},
		{name: "hello past its record", in: record(recordTypeHandshake, good[:30]), want: wantShort},
		{name: "fragmented one byte a record", in: records(good, 1), sni: "example.com"},
		{name: "fragmented header split", in: cat(records(good[:2], 2), records(good[2:], 1<<14)), sni: "example.com"},
		{name: "fragment then alert", in: cat(records(good[:10], 10), record(recordTypeAlert, []byte{2, 40}), records(good[10:], 1<<14)), want: wantBad, cause: "record type 0x15"},
		{name: "application data record", in: record(0x17, good), want: wantBad, cause: "record type 0x17"},
		{name: "record version 2", in: cat([]byte{recordTypeHandshake, 2, 0}, u16(len(good)), good), want: wantBad, cause: "version"},
		{name: "zero length record", in: cat([]byte{recordTypeHandshake, 3, 1, 0, 0}, records(good, 1<<14)), want: wantBad, cause: "record length 0"},
		{name: "record over 16 KiB", in: cat([]byte{recordTypeHandshake, 3, 1}, u16(1<<14+1)), want: wantBad, cause: "record length"},
		{name: "huge handshake length", in: hugeLen, want: wantBad, cause: "over"},
		{name: "server hello", in: records(handshake(2, helloBody()), 1<<14), want: wantBad, cause: "not ClientHello"},
		{name: "hello over the bound", in: records(big, 1<<14), want: wantBad, cause: "longer than"},
		{name: "hello at the bound", in: records(atLimit, 1<<14)},
		{name: "tiny fragments past the bound", in: records(mid, 3)[:maxHelloBytes], want: wantBad, cause: "longer than"},
		{name: "bytes after the hello ignored", in: cat(withSNI("a.test"), record(0x17, []byte("x"))), sni: "a.test"},
		{name: "not tls", in: []byte("SSH-2.0-OpenSSH_9.6\r\n"), want: wantBad, cause: "record type 0x53"},
	}
}

func TestParseClientHello(t *testing.T) {
	for _, tc := range helloCases() {
		t.Run(tc.name, func(t *testing.T) {
			name, err := parseClientHello(tc.in)
			switch tc.want {
			case wantOK:
				if err != nil || name != tc.sni {
					t.Fatalf("got %q, %v; want %q", name, err, tc.sni)
				}
			case wantShort:
				if !errors.Is(err, errHelloShort) {
					t.Fatalf("got %q, %v; want errHelloShort", name, err)
				}
			case wantBad:
				if !errors.Is(err, errHelloBad) || !strings.Contains(err.Error(), tc.cause) {
					t.Fatalf("got %q, %v; want errHelloBad with %q", name, err, tc.cause)
				}
			case wantECH:
				if !errors.Is(err, errHelloECH) || name != "" {
					t.Fatalf("got %q, %v; want errHelloECH", name, err)
				}
			}
		})
	}
}

// memConn is a net.Conn reading from r and recording what is written.
type memConn struct {
	r       io.Reader
	written bytes.Buffer
}

func (c *memConn) Read(b []byte) (int, error)       { return c.r.Read(b) }
func (c *memConn) Write(b []byte) (int, error)      { return c.written.Write(b) }
func (c *memConn) Close() error                     { return nil }
func (c *memConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (c *memConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (c *memConn) SetDeadline(time.Time) error      { return nil }
func (c *memConn) SetReadDeadline(time.Time) error  { return nil }
func (c *memConn) SetWriteDeadline(time.Time) error { return nil }

// realHello is the first flight of a crypto/tls client with cfg.
func realHello(t testing.TB, cfg *tls.Config) []byte {
	t.Helper()
	c := &memConn{r: bytes.NewReader(nil)}
	if err := tls.Client(c, cfg).Handshake(); err == nil {
		t.Fatal("handshake with no server succeeded")
	}
	if c.written.Len() == 0 {
		t.Fatal("the client wrote nothing")
	}
	return c.written.Bytes()
}

var errStop = errors.New("stop after the hello")

// goServerName is what a crypto/tls server reads as the server name of
// the ClientHello in b; ok is false when it does not get a ClientHello.
func goServerName(b []byte) (name string, ok bool) {
	cfg := &tls.Config{GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
		name, ok = h.ServerName, true
		return nil, errStop
	}}
	tls.Server(&memConn{r: bytes.NewReader(b)}, cfg).Handshake()
	return name, ok
}

type realCase struct {
	cfg  *tls.Config
	want string
}

func realCases() []realCase {
	long := strings.Repeat(strings.Repeat("a", 62)+".", 4)[:250] + ".io"
	tls12 := func(name string) *tls.Config { return &tls.Config{ServerName: name, MaxVersion: tls.VersionTLS12} }
	return []realCase{
		{&tls.Config{ServerName: "example.com"}, "example.com"},
		{&tls.Config{ServerName: "registry.npmjs.org", NextProtos: []string{"h2", "http/1.1"}}, "registry.npmjs.org"},
		{tls12("api.github.com"), "api.github.com"},
		{&tls.Config{ServerName: "Mixed.Case.Example"}, "Mixed.Case.Example"},
		{&tls.Config{ServerName: "trailing.dot.example."}, "trailing.dot.example"},
		{&tls.Config{ServerName: "xn--bcher-kva.example"}, "xn--bcher-kva.example"},
		{&tls.Config{ServerName: long}, long},
		{&tls.Config{ServerName: "127.0.0.1"}, ""}, // crypto/tls sends no SNI for an address
		{&tls.Config{InsecureSkipVerify: true}, ""},
	}
}

// The parser reads what a real crypto/tls client sends, whole, one byte
// at a time, and refragmented into small records; and it agrees with a
// crypto/tls server.
func TestParseClientHelloFromCryptoTLS(t *testing.T) {
	for _, rc := range realCases() {
		b := realHello(t, rc.cfg)
		if name, err := parseClientHello(b); err != nil || name != rc.want {
			t.Errorf("ServerName %q: parsed %q, %v; want %q", rc.cfg.ServerName, name, err, rc.want)
			continue
		}
		if name, ok := goServerName(b); !ok || name != rc.want {
			t.Errorf("ServerName %q: crypto/tls server read %q, %v", rc.cfg.ServerName, name, ok)
		}
		for i := range len(b) {
			if _, err := parseClientHello(b[:i]); !errors.Is(err, errHelloShort) {
				t.Fatalf("ServerName %q: prefix of %d/%d bytes: %v, want errHelloShort", rc.cfg.ServerName, i, len(b), err)
			}
		}
		msg := b[recordHeaderLen:] // crypto/tls sends the hello in one record
		for _, size := range []int{1, 3, 100} {
			if name, err := parseClientHello(records(msg, size)); err != nil || name != rc.want {
				t.Errorf("ServerName %q in %d-byte records: %q, %v", rc.cfg.ServerName, size, name, err)
			}
		}
	}
}

// FuzzParseClientHello checks that the parser never panics, answers in
// exactly one class, waits only below the bound, ignores what follows a
// complete hello, and never returns a name other than the one a
// crypto/tls server reads from the same bytes.
func FuzzParseClientHello(f *testing.F) {
	for _, tc := range helloCases() {
		f.Add(tc.in)
	}
	for _, rc := range realCases() {
		f.Add(realHello(f, rc.cfg))
	}
	f.Add(realHello(f, &tls.Config{ServerName: "secret.example", MinVersion: tls.VersionTLS13,
		EncryptedClientHelloConfigList: echConfigList(f, "example.com")}))
	f.Fuzz(func(t *testing.T, b []byte) {
		name, err := parseClientHello(b)
		short, bad, ech := errors.Is(err, errHelloShort), errors.Is(err, errHelloBad), errors.Is(err, errHelloECH)
		classes := 0
		for _, in := range []bool{short, bad, ech} {
			if in {
				classes++
			}
		}
		switch {
		case err != nil && classes != 1:
			t.Fatalf("error in no class or both: %v", err)
		case err != nil && name != "":
			t.Fatalf("name %q with error %v", name, err)
		case short && len(b) >= maxHelloBytes:
			t.Fatalf("waits for more after %d bytes", len(b))
		case err == nil:
			if msg, _ := reassembleHandshake(b); !bytes.Contains(msg, []byte(name)) {
				t.Fatalf("name %q is not in the hello", name)
			}
			if again, err2 := parseClientHello(append(b[:len(b):len(b)], 0x17, 3, 3, 0, 1, 0)); again != name || err2 != nil {
				t.Fatalf("trailing bytes changed %q to %q, %v", name, again, err2)
			}
		}
		goName, goOK := goServerName(b)
		if !goOK {
			return
		}
		if short {
			t.Fatalf("crypto/tls read a whole hello (name %q) where the parser waits for more", goName)
		}
		if err == nil && name != goName {
			t.Fatalf("parser read %q, crypto/tls read %q", name, goName)
		}
	})
}

// echConfigList is an ECHConfigList (RFC 9849 §4) with one X25519,
// HKDF-SHA256, AES-128-GCM configuration whose public name is publicName.
func echConfigList(t testing.TB, publicName string) []byte {
	t.Helper()
	key, err := ecdh.X25519().GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	contents := cat(
		[]byte{7}, u16(0x0020), vec16(key.PublicKey().Bytes()), // config id, KEM, public key
		vec16(u16(0x0001), u16(0x0001)),                      // one suite: HKDF-SHA256, AES-128-GCM
		[]byte{0, byte(len(publicName))}, []byte(publicName), // maximum_name_length, public_name
		vec16(), // no extensions
	)
	return vec16(cat(u16(extensionECH), vec16(contents)))
}

// A real crypto/tls client offering ECH: its outer server_name is the
// public name (what a check of the outer hello would pass) while the
// server it means is the encrypted inner name. The parser refuses it
// whatever the outer name says.
func TestParseClientHelloRealECH(t *testing.T) {
	b := realHello(t, &tls.Config{
		ServerName:                     "secret.example",
		MinVersion:                     tls.VersionTLS13,
		EncryptedClientHelloConfigList: echConfigList(t, "example.com"),
	})
	if name, ok := goServerName(b); !ok || name != "example.com" {
		t.Fatalf("crypto/tls reads the outer name %q (%v); want the public name example.com", name, ok)
	}
	if name, err := parseClientHello(b); !errors.Is(err, errHelloECH) {
		t.Fatalf("parseClientHello = %q, %v; want errHelloECH", name, err)
	}
}
