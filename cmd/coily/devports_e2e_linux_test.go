//go:build coilydev

package main

import (
	"bufio"
	"crypto/tls"
	"encoding/binary"
	"encoding/hex"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"coily.dev/coily/client/tsnode"
)

// TestCLIDevPorts lists every port a running `coily dev` listens on (from
// /proc), sends each hostile HTTP requests and garbage, and checks it
// still serves (a `GET /` to its control server used to panic the
// process); then kills it, and a client says at once that it is not
// running instead of waiting 30 s to join a dead tailnet.
func TestCLIDevPorts(t *testing.T) {
	dir := shortDir(t)
	p := startDev(t, dir, "--state-dir", dir)
	info, err := tsnode.ReadDevInfo(dir)
	if err != nil {
		t.Fatal(err)
	}
	env, err := os.ReadFile(filepath.Join(dir, "env"))
	if err != nil {
		t.Fatal(err)
	}
	_, console, _ := strings.Cut(string(env), "COILY_DEV_CONSOLE=")
	console, _, _ = strings.Cut(console, "\n")
	console = strings.Trim(console, "'")
	t.Setenv("COILY_DEV", dir)
	t.Setenv("COILY_DEV_AS", "owner")
	if r := runCoily(t, nil, "status"); r.code != 0 {
		t.Fatalf("status: %+v", r)
	}

	ls := listeners(t, p.cmd.Process.Pid)
	hc := &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{Proxy: nil, TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	var loopTCP []string
	unspecified := map[string]int{}
	for _, l := range ls {
		switch a := l.addr.Addr(); {
		case a.IsUnspecified():
			// Tailscale's nodes (the server's, the console's, the
			// bridge's) bind their WireGuard UDP sockets and their peer
			// API on every address, whatever their control server's:
			// tsnet has no setting for it. Nothing of coily's does.
			unspecified[l.proto]++
			loop := netip.MustParseAddr("127.0.0.1")
			if a.Is6() {
				loop = netip.IPv6Loopback()
			}
			l.addr = netip.AddrPortFrom(loop, l.addr.Port())
		case !a.IsLoopback():
			t.Errorf("coily dev listens on %s %s, not loopback", l.proto, l.addr)
		}
		if l.proto == "udp" {
			for _, junk := range [][]byte{{}, {0}, make([]byte, 1500), []byte("\x00\x01\x00\x00\x21\x12\xa4\x42garbage")} {
				sendJunkTo(t, "udp", l.addr.String(), junk)
			}
			continue
		}
		for _, scheme := range []string{"http", "https"} {
			for _, path := range []string{"/", "/machine/register", "/c2n/x", "/key/..", "/ts2021", "/derp", "/api/status"} {
				if resp, err := hc.Get(scheme + "://" + l.addr.String() + path); err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			}
		}
		for _, junk := range [][]byte{{0, 0xff, 0x13}, []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"), []byte("\x16\x03\x01\x00\x05hello"), make([]byte, 70000)} {
			sendJunkTo(t, "tcp", l.addr.String(), junk)
		}
		if l.wasLoopback {
			loopTCP = append(loopTCP, l.addr.String())
		}
	}
	// Three nodes: at most one peer API and two WireGuard sockets each.
	if unspecified["tcp"] > 3 || unspecified["udp"] > 6 {
		t.Errorf("coily dev listens on every address more than its three tailnet nodes do: %v", unspecified)
	}
	// Its own servers are among the loopback listeners: control, console.
	for _, u := range []string{info.ControlURL, console} {
		pu, err := url.Parse(u)
		if err != nil || !containsString(loopTCP, pu.Host) {
			t.Errorf("%s is not among the loopback listeners %v", u, loopTCP)
		}
	}
	select {
	case <-p.exited:
		t.Fatalf("coily dev died of the requests:\n%s", p.log)
	default:
	}
	if r := runCoily(t, nil, "status"); r.code != 0 {
		t.Fatalf("status after the requests: %+v\n%s", r, p.log)
	}

	// Killed, it leaves dev.json behind: the client says it is not running.
	_ = p.cmd.Process.Kill()
	<-p.exited
	start := time.Now()
	r := runCoily(t, nil, "status")
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("the client took %v to find coily dev gone", took)
	}
	if r.code == 0 || !strings.Contains(r.stderr, "coily dev is not running with state dir "+dir) || !strings.Contains(r.stderr, "coily dev --state-dir "+dir) {
		t.Errorf("status of a killed coily dev: %+v", r)
	}
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// sendJunkTo writes data to addr and reads until the peer closes or a
// short deadline passes.
func sendJunkTo(t *testing.T, network, addr string, data []byte) {
	t.Helper()
	c, err := net.DialTimeout(network, addr, 2*time.Second)
	if err != nil {
		t.Fatalf("dial %s %s: %v", network, addr, err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(300 * time.Millisecond))
	_, _ = c.Write(data)
	_, _ = io.Copy(io.Discard, c)
}

// listener is a socket a process listens on.
type listener struct {
	proto       string // tcp or udp
	addr        netip.AddrPort
	wasLoopback bool
}

// listeners lists the TCP sockets pid listens on and the UDP sockets it
// has bound, from /proc: its descriptors' socket inodes, looked up in
// /proc/PID/net/{tcp,tcp6,udp,udp6}.
func listeners(t *testing.T, pid int) []listener {
	t.Helper()
	fdDir := filepath.Join("/proc", strconv.Itoa(pid), "fd")
	fds, err := os.ReadDir(fdDir)
	if err != nil {
		t.Fatal(err)
	}
	inodes := map[string]bool{}
	for _, fd := range fds {
		link, err := os.Readlink(filepath.Join(fdDir, fd.Name()))
		if ino, ok := strings.CutPrefix(link, "socket:["); err == nil && ok {
			inodes[strings.TrimSuffix(ino, "]")] = true
		}
	}
	var out []listener
	for _, table := range []struct{ file, proto, state string }{
		{"tcp", "tcp", "0A"}, {"tcp6", "tcp", "0A"}, {"udp", "udp", "07"}, {"udp6", "udp", "07"},
	} {
		f, err := os.Open(filepath.Join("/proc", strconv.Itoa(pid), "net", table.file))
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		sc.Scan() // the header
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) < 10 || fields[3] != table.state || !inodes[fields[9]] {
				continue
			}
			addr, err := procAddr(fields[1])
			if err != nil {
				t.Fatalf("%s: %q: %v", table.file, fields[1], err)
			}
			out = append(out, listener{proto: table.proto, addr: addr, wasLoopback: addr.Addr().IsLoopback()})
		}
		f.Close()
	}
	if len(out) == 0 {
		t.Fatal("coily dev listens nowhere")
	}
	return out
}

// procAddr parses /proc/net's ADDR:PORT in hex, the address as 32-bit
// words in host (little-endian) order.
func procAddr(s string) (netip.AddrPort, error) {
	hexAddr, hexPort, _ := strings.Cut(s, ":")
	b, err := hex.DecodeString(hexAddr)
	if err != nil {
		return netip.AddrPort{}, err
	}
	port, err := strconv.ParseUint(hexPort, 16, 16)
	if err != nil {
		return netip.AddrPort{}, err
	}
	for i := 0; i+4 <= len(b); i += 4 {
		binary.BigEndian.PutUint32(b[i:], binary.LittleEndian.Uint32(b[i:]))
	}
	a, ok := netip.AddrFromSlice(b)
	if !ok {
		return netip.AddrPort{}, err
	}
	return netip.AddrPortFrom(a.Unmap(), uint16(port)), nil
}
