package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"
)

// EgressConnectCommand is the hidden subcommand ssh runs as its
// ProxyCommand inside a proxied sandbox (see gitSSHCommand).
const EgressConnectCommand = "__egress-connect"

// Bounds of the proxy's answer to CONNECT.
const (
	maxConnectLine    = 1 << 10 // the status line and each header line
	maxConnectHeaders = 64      // header lines
	maxRefusalBody    = 4 << 10 // what is shown of a refusal
	connectTimeout    = 60 * time.Second
)

// runEgressConnect runs inside a proxied sandbox as ssh's ProxyCommand
// (`coily __egress-connect HOST PORT`): it asks the bridge on the
// sandbox's loopback (the proxy variables) for a CONNECT tunnel to
// HOST:PORT and relays stdin and stdout through it. When the egress proxy
// refuses, its message (which names the rule and the host) goes to stderr,
// where ssh shows it, and the exit code is 1.
func runEgressConnect(ctx context.Context, e *env) int {
	if len(e.args) != 2 {
		fmt.Fprintln(e.stderr, "usage: coily "+EgressConnectCommand+" HOST PORT")
		return 2
	}
	target, err := connectTarget(e.args[0], e.args[1])
	if err != nil {
		printLine(e.stderr, "coily: egress-connect: %v", err)
		return 2
	}
	proxy, err := bridgeProxy(os.Getenv)
	if err != nil {
		printLine(e.stderr, "coily: egress-connect: %v", err)
		return 2
	}
	d := net.Dialer{Timeout: 10 * time.Second}
	conn, err := d.DialContext(ctx, "tcp", proxy)
	if err != nil {
		printLine(e.stderr, "coily: egress-connect: the egress bridge: %v", err)
		return 1
	}
	defer conn.Close()
	br, ok := openTunnel(conn, target, e.stderr)
	if !ok {
		return 1
	}
	if err := splice(e.stdin, e.stdout, br, conn); err != nil {
		printLine(e.stderr, "coily: egress-connect: %s: %v", target, err)
		return 1
	}
	return 0
}

// openTunnel sends CONNECT target and reads the answer; on a refusal it
// prints the proxy's message and reports false. The reader it returns
// holds what the peer already sent after the answer.
func openTunnel(conn net.Conn, target string, stderr io.Writer) (*bufio.Reader, bool) {
	_ = conn.SetDeadline(time.Now().Add(connectTimeout))
	if _, err := fmt.Fprintf(conn, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target); err != nil {
		printLine(stderr, "coily: egress-connect: the egress bridge: %v", err)
		return nil, false
	}
	br := bufio.NewReaderSize(conn, maxConnectLine)
	code, body, err := readConnectResponse(br)
	if err != nil {
		printLine(stderr, "coily: egress-connect: %s: %v", target, err)
		return nil, false
	}
	if code/100 != 2 {
		msg := strings.TrimRight(string(body), "\r\n")
		if msg == "" {
			msg = fmt.Sprintf("coily: the egress proxy refused %s (HTTP %d)", target, code)
		}
		for _, l := range strings.Split(msg, "\n") {
			printLine(stderr, "%s", strings.TrimSuffix(l, "\r"))
		}
		return nil, false
	}
	_ = conn.SetDeadline(time.Time{})
	return br, true
}

// connectTarget checks ssh's %h and %p and writes them as a CONNECT
// target: a host name of letters, digits, dots, hyphens and underscores,
// or an IP address (IPv6 in brackets, no zone); a port from 1 to 65535.
func connectTarget(host, port string) (string, error) {
	p, err := parseDecimalPort(port)
	if err != nil {
		return "", err
	}
	if a, err := netip.ParseAddr(host); err == nil {
		if a.Zone() != "" {
			return "", fmt.Errorf("host %q: an address with a zone cannot go through the proxy", host)
		}
		return netip.AddrPortFrom(a, uint16(p)).String(), nil
	}
	if host == "" || len(host) > 253 || host[0] == '-' || host[0] == '.' {
		return "", fmt.Errorf("bad host %q", host)
	}
	for _, c := range []byte(host) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '-' || c == '_') {
			return "", fmt.Errorf("bad host %q", host)
		}
	}
	return host + ":" + strconv.Itoa(p), nil
}

// parseDecimalPort reads a port: 1 to 65535, decimal digits only, no
// leading zero or sign.
func parseDecimalPort(s string) (int, error) {
	if s == "" || len(s) > 5 || s[0] < '1' || s[0] > '9' || strings.Trim(s, "0123456789") != "" {
		return 0, fmt.Errorf("port %q must be a number from 1 to 65535", s)
	}
	p, err := strconv.Atoi(s)
	if err != nil || p > 65535 {
		return 0, fmt.Errorf("port %q must be a number from 1 to 65535", s)
	}
	return p, nil
}

// bridgeProxy returns the address of the bridge from the first of
// HTTPS_PROXY, https_proxy and ALL_PROXY that is set: it must read
// http://127.0.0.1:PORT (with an optional final slash), the bridge on the
// sandbox's loopback. Anything else is refused rather than sent the
// host's name: in the sandbox nothing else leads out anyway.
func bridgeProxy(getenv func(string) string) (string, error) {
	for _, name := range []string{"HTTPS_PROXY", "https_proxy", "ALL_PROXY"} {
		if v := getenv(name); v != "" {
			addr, err := parseBridgeURL(v)
			if err != nil {
				return "", fmt.Errorf("%s: %w", name, err)
			}
			return addr, nil
		}
	}
	return "", errors.New("no proxy in the environment (HTTPS_PROXY): run inside a sandbox with network proxied")
}

// parseBridgeURL accepts exactly http://127.0.0.1:PORT[/].
func parseBridgeURL(s string) (string, error) {
	rest, ok := strings.CutPrefix(s, "http://127.0.0.1:")
	if !ok {
		return "", fmt.Errorf("%q is not the egress bridge (want http://127.0.0.1:PORT)", s)
	}
	port, err := parseDecimalPort(strings.TrimSuffix(rest, "/"))
	if err != nil {
		return "", fmt.Errorf("%q is not the egress bridge: %w", s, err)
	}
	return "127.0.0.1:" + strconv.Itoa(port), nil
}

// readConnectResponse reads the proxy's answer to CONNECT: a status line
// (HTTP/1.0 or HTTP/1.1, a status from 200 to 599, an optional reason),
// header lines, an empty line, each line ending in CRLF and holding no
// control character but tab. For a status other than 2xx it returns the
// body too (Content-Length bytes, or up to the end; at most
// maxRefusalBody). After a 2xx, nothing beyond the empty line is read
// from br: what follows is the tunnel's.
func readConnectResponse(br *bufio.Reader) (code int, body []byte, err error) {
	line, err := readHeadLine(br)
	if err != nil {
		return 0, nil, fmt.Errorf("the egress proxy's answer: %w", err)
	}
	if code, err = parseStatusLine(line); err != nil {
		return 0, nil, err
	}
	length := -1
	for n := 0; ; n++ {
		if n == maxConnectHeaders {
			return 0, nil, errors.New("the egress proxy's answer has too many header lines")
		}
		line, err := readHeadLine(br)
		if err != nil {
			return 0, nil, fmt.Errorf("the egress proxy's answer: %w", err)
		}
		if line == "" {
			break
		}
		name, value, ok := strings.Cut(line, ":")
		if !ok || name == "" || strings.ContainsAny(name, " \t") {
			return 0, nil, fmt.Errorf("the egress proxy's answer has a malformed header line %q", line)
		}
		if strings.EqualFold(name, "Content-Length") {
			l, err := strconv.Atoi(strings.Trim(value, " \t"))
			if err != nil || l < 0 || length >= 0 && l != length {
				return 0, nil, fmt.Errorf("the egress proxy's answer has a bad Content-Length %q", value)
			}
			length = l
		}
	}
	if code/100 == 2 {
		return code, nil, nil // a CONNECT success has no body (RFC 9110, 9.3.6)
	}
	limit := int64(maxRefusalBody)
	if length >= 0 && int64(length) < limit {
		limit = int64(length)
	}
	body, _ = io.ReadAll(io.LimitReader(br, limit)) // what arrived is shown, even if cut short
	return code, body, nil
}

// readHeadLine reads one line of the answer's head, without its CRLF.
func readHeadLine(br *bufio.Reader) (string, error) {
	line, err := br.ReadSlice('\n')
	switch {
	case errors.Is(err, bufio.ErrBufferFull):
		return "", errors.New("line too long")
	case errors.Is(err, io.EOF):
		return "", errors.New("the connection ended before the end of the answer")
	case err != nil:
		return "", err
	case len(line) < 2 || line[len(line)-2] != '\r':
		return "", errors.New("a line does not end in CRLF")
	}
	s := string(line[:len(line)-2])
	for _, c := range []byte(s) {
		if c < 0x20 && c != '\t' || c == 0x7f {
			return "", fmt.Errorf("control character in %q", s)
		}
	}
	return s, nil
}

// parseStatusLine reads "HTTP/1.1 403 Forbidden": the version HTTP/1.0 or
// HTTP/1.1, three digits from 200 to 599 (an interim 1xx is not expected
// from the egress proxy), then nothing or a space and a reason.
func parseStatusLine(line string) (int, error) {
	version, rest, _ := strings.Cut(line, " ")
	if version != "HTTP/1.1" && version != "HTTP/1.0" {
		return 0, fmt.Errorf("the egress proxy's answer is not HTTP: %q", line)
	}
	digits, _, _ := strings.Cut(rest, " ")
	if len(digits) != 3 || strings.Trim(digits, "0123456789") != "" || digits[0] < '2' || digits[0] > '5' {
		return 0, fmt.Errorf("the egress proxy's answer has a bad status: %q", line)
	}
	code, _ := strconv.Atoi(digits)
	return code, nil
}

// splice relays bytes between a local side (read from in, written to
// out) and a remote one (read from rin, written to rout) until the remote
// side's bytes end. The end of the local input is passed on as a
// half-close (rout's CloseWrite), so that the peer sees it and may still
// answer; the end of the remote's bytes ends the relay. It returns the
// error that ended the remote-to-local direction (nil at a clean end),
// without waiting for the local-to-remote copy: the caller ends that one
// by closing its side.
func splice(in io.Reader, out io.Writer, rin io.Reader, rout io.Writer) error {
	go func() {
		_, _ = io.Copy(rout, in)
		if cw, ok := rout.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		}
	}()
	_, err := io.Copy(out, rin)
	if cw, ok := out.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
	return err
}
