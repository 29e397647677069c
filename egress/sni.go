package egress

import (
	"errors"
	"fmt"
	"io"
	"net"
	"time"
)

// Reasons a tunnel is refused after its 200, once its first bytes are read.
const (
	reasonSNIMismatch = "sni-mismatch"
	reasonBadHello    = "bad-client-hello"
	reasonECH         = "encrypted-client-hello"
)

// maxLoggedName bounds the server name quoted in a log line.
const maxLoggedName = 256

// sniffed is what sniff made of a tunnel's first client bytes.
type sniffed struct {
	data    []byte // read from the client; forwarded unchanged unless refused
	readErr error  // the read error that ended sniffing early, if any
	refuse  string // the row's reason when the tunnel must be refused
	sni     string // the server_name sent, for the log
	problem string // what was wrong with the hello, for the log
}

// message is the sentence a refused tunnel's row carries.
func (s sniffed) message(t Target, rule string) string {
	if s.refuse == reasonSNIMismatch {
		name := s.sni
		if len(name) > maxLoggedName {
			name = name[:maxLoggedName] + "..."
		}
		return fmt.Sprintf("coily: the TLS server name %q sent through the tunnel to %s is not that host; refused (rule %q)", name, t, rule)
	}
	if s.refuse == reasonECH {
		return fmt.Sprintf("coily: the TLS ClientHello sent to %s offers Encrypted Client Hello, which hides the server name from the egress allowlist; refused (rule %q): turn ECH off in the client", t, rule)
	}
	return fmt.Sprintf("coily: the TLS ClientHello sent to %s could not be read; refused (rule %q)", t, rule)
}

// logAttrs names, for the log line, what the refusal was about.
func (s sniffed) logAttrs() []any {
	if s.refuse == reasonSNIMismatch {
		name := s.sni
		if len(name) > maxLoggedName {
			name = name[:maxLoggedName] + "..."
		}
		return []any{"sni", name}
	}
	if s.problem != "" {
		return []any{"hello", s.problem}
	}
	return nil
}

// sniff reads a tunnel's first client bytes from r. Unless they begin a
// TLS handshake record they pass as they are (ssh, or any other protocol).
// If they do, it reads on until the ClientHello is complete, within
// maxHelloBytes and one IdleTimeout, and refuses a hello it cannot parse
// and one whose server_name is not the CONNECT host (see sniMatches).
func (p *Proxy) sniff(c *conn, r io.Reader, t Target, m *meter) sniffed {
	buf := make([]byte, maxHelloBytes)
	n, err := io.ReadAtLeast(r, buf, 1)
	m.touch()
	if n == 0 {
		return sniffed{readErr: err}
	}
	if buf[0] != recordTypeHandshake {
		return sniffed{data: buf[:n]}
	}
	c.client.SetReadDeadline(time.Now().Add(p.cfg.IdleTimeout))
	defer c.client.SetReadDeadline(time.Time{})
	for {
		name, perr := parseClientHello(buf[:n])
		switch {
		case perr == nil && name != "" && !sniMatches(t, name):
			return sniffed{refuse: reasonSNIMismatch, sni: name}
		case perr == nil:
			return sniffed{data: buf[:n]}
		case errors.Is(perr, errHelloECH):
			return sniffed{refuse: reasonECH, problem: perr.Error()}
		case !errors.Is(perr, errHelloShort):
			return sniffed{refuse: reasonBadHello, problem: perr.Error()}
		case err != nil:
			return sniffed{refuse: reasonBadHello, problem: "incomplete ClientHello: " + err.Error()}
		case n == len(buf): // unreachable: the parser bounds the hello below len(buf)
			return sniffed{refuse: reasonBadHello, problem: "ClientHello too long"}
		}
		var more int
		more, err = r.Read(buf[n:])
		n += more
		m.touch()
	}
}

// sniMatches says whether a server_name names the CONNECT target: its
// host name, up to ASCII case and one trailing dot. No name matches an IP
// literal target (a name is not an address, and RFC 6066 forbids
// addresses in server_name).
func sniMatches(t Target, name string) bool {
	if t.Addr.IsValid() {
		return false
	}
	if n := len(name); n > 0 && name[n-1] == '.' {
		name = name[:n-1]
	}
	if len(name) != len(t.Host) {
		return false
	}
	for i := range len(name) {
		b := name[i]
		if 'A' <= b && b <= 'Z' {
			b += 'a' - 'A'
		}
		if b != t.Host[i] {
			return false
		}
	}
	return true
}

// refuseTLS tells a TLS client that refused tunnel's fate with a fatal
// access_denied alert (RFC 8446 §6.2), best effort.
func refuseTLS(w net.Conn) {
	const fatal, accessDenied = 2, 49
	w.SetWriteDeadline(time.Now().Add(time.Second))
	w.Write([]byte{recordTypeAlert, 3, 3, 0, 2, fatal, accessDenied})
}
