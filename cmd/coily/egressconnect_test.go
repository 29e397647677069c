package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParseBridgeURL(t *testing.T) {
	for _, c := range []struct {
		in, want string // want "" when refused
	}{
		{"http://127.0.0.1:8080", "127.0.0.1:8080"},
		{"http://127.0.0.1:1/", "127.0.0.1:1"},
		{"http://127.0.0.1:65535", "127.0.0.1:65535"},
		{"", ""},
		{"127.0.0.1:8080", ""},
		{"https://127.0.0.1:8080", ""},
		{"HTTP://127.0.0.1:8080", ""},
		{"socks5://127.0.0.1:1080", ""},
		{"http://localhost:8080", ""},
		{"http://127.0.0.2:8080", ""},
		{"http://127.0.0.1.evil.example:8080", ""},
		{"http://127.0.0.1@evil.example:8080", ""},
		{"http://user:pw@127.0.0.1:8080", ""},
		{"http://[::1]:8080", ""},
		{"http://0x7f000001:8080", ""},
		{"http://127.0.0.1", ""},
		{"http://127.0.0.1:", ""},
		{"http://127.0.0.1:0", ""},
		{"http://127.0.0.1:65536", ""},
		{"http://127.0.0.1:08080", ""},
		{"http://127.0.0.1:+8080", ""},
		{"http://127.0.0.1:-1", ""},
		{"http://127.0.0.1: 8080", ""},
		{"http://127.0.0.1:8080 ", ""},
		{"http://127.0.0.1:8080//", ""},
		{"http://127.0.0.1:8080/path", ""},
		{"http://127.0.0.1:8080?x", ""},
		{"http://127.0.0.1:8080#x", ""},
		{"http://127.0.0.1:8080\r\nX: y", ""},
		{"http://127.0.0.1:99999999999999999999", ""},
	} {
		got, err := parseBridgeURL(c.in)
		if got != c.want || (err == nil) != (c.want != "") {
			t.Errorf("parseBridgeURL(%q) = %q, %v; want %q", c.in, got, err, c.want)
		}
	}
}

func TestBridgeProxyOrder(t *testing.T) {
	vars := map[string]string{}
	getenv := func(k string) string { return vars[k] }
	if _, err := bridgeProxy(getenv); err == nil {
		t.Error("no proxy variable: accepted")
	}
	vars["ALL_PROXY"] = "http://127.0.0.1:3"
	vars["https_proxy"] = "http://127.0.0.1:2"
	if got, err := bridgeProxy(getenv); got != "127.0.0.1:2" || err != nil {
		t.Errorf("https_proxy before ALL_PROXY: %q, %v", got, err)
	}
	vars["HTTPS_PROXY"] = "http://evil.example:1"
	if got, err := bridgeProxy(getenv); err == nil || !strings.Contains(err.Error(), "HTTPS_PROXY") {
		t.Errorf("a bad HTTPS_PROXY must be refused, not skipped: %q, %v", got, err)
	}
	vars["HTTPS_PROXY"] = "http://127.0.0.1:1"
	if got, err := bridgeProxy(getenv); got != "127.0.0.1:1" || err != nil {
		t.Errorf("HTTPS_PROXY first: %q, %v", got, err)
	}
}

func TestConnectTarget(t *testing.T) {
	for _, c := range []struct {
		host, port, want string // want "" when refused
	}{
		{"github.com", "22", "github.com:22"},
		{"Git_Host-1.example", "2222", "Git_Host-1.example:2222"},
		{"127.0.0.1", "65535", "127.0.0.1:65535"},
		{"::1", "22", "[::1]:22"},
		{"", "22", ""},
		{"github.com", "", ""},
		{"github.com", "0", ""},
		{"github.com", "65536", ""},
		{"github.com", "022", ""},
		{"github.com", "+22", ""},
		{"github.com", "22 ", ""},
		{"github.com", "0x16", ""},
		{"github.com", "ssh", ""},
		{"github.com:22", "22", ""},
		{"[::1]", "22", ""},
		{"fe80::1%eth0", "22", ""},
		{"user@github.com", "22", ""},
		{"github.com HTTP/1.1\r\nX-Evil: 1\r\n", "22", ""},
		{"github.com\n", "22", ""},
		{"a b", "22", ""},
		{"a/b", "22", ""},
		{"-oProxyCommand=x", "22", ""},
		{".github.com", "22", ""},
		{"bücher.example", "22", ""},
		{strings.Repeat("a", 254), "22", ""},
	} {
		got, err := connectTarget(c.host, c.port)
		if got != c.want || (err == nil) != (c.want != "") {
			t.Errorf("connectTarget(%q, %q) = %q, %v; want %q", c.host, c.port, got, err, c.want)
		}
	}
}

// connectResponseCases are answers to CONNECT, good and hostile: code 0
// when refused as malformed.
var connectResponseCases = []struct {
	in   string
	code int
	body string
	rest string // what stays in the reader for the tunnel
}{
	{"HTTP/1.1 200 Connection established\r\n\r\nSSH-2.0-OpenSSH\r\n", 200, "", "SSH-2.0-OpenSSH\r\n"},
	{"HTTP/1.0 200\r\n\r\n", 200, "", ""},
	{"HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\nabcde", 204, "", "abcde"},
	{"HTTP/1.1 403 Forbidden\r\nContent-Type: text/plain\r\nContent-Length: 13\r\nX-Coily-Egress: refused\r\n\r\ncoily: nope.\nSSH", 403, "coily: nope.\n", "SSH"},
	{"HTTP/1.1 502 Bad Gateway\r\n\r\nuntil the end", 502, "until the end", ""},
	{"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n", 403, "", ""},
	{"HTTP/1.1 403 Forbidden\r\nContent-Length: 99\r\n\r\nshort", 403, "short", ""},
	{"HTTP/1.1 403 Forbidden\r\ncontent-length: 2\r\nContent-Length: 2\r\n\r\nokx", 403, "ok", "x"},
	{"HTTP/1.1 403 Forbidden\r\n\r\n" + strings.Repeat("x", maxRefusalBody+10), 403, strings.Repeat("x", maxRefusalBody), strings.Repeat("x", 10)},
	{"", 0, "", ""},
	{"HTTP/1.1 200 OK\r\n", 0, "", ""},
	{"HTTP/1.1 200 OK\n\n", 0, "", ""},
	{"HTTP/1.1 200 OK\r\nX: y\n\r\n", 0, "", ""},
	{"HTTP/2 200\r\n\r\n", 0, "", ""},
	{"HTTP/1.1  200\r\n\r\n", 0, "", ""},
	{"HTTP/1.1 20\r\n\r\n", 0, "", ""},
	{"HTTP/1.1 2000\r\n\r\n", 0, "", ""},
	{"HTTP/1.1 +200\r\n\r\n", 0, "", ""},
	{"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\n\r\n", 0, "", ""},
	{"HTTP/1.1 600 Nope\r\n\r\n", 0, "", ""},
	{"HTTP/1.1 099 Nope\r\n\r\n", 0, "", ""},
	{"http/1.1 200 OK\r\n\r\n", 0, "", ""},
	{"SSH-2.0-OpenSSH_9.2\r\n", 0, "", ""},
	{"HTTP/1.1 200 OK\x1b[2J\r\n\r\n", 0, "", ""},
	{"HTTP/1.1 200 OK\r\nX: a\x00b\r\n\r\n", 0, "", ""},
	{"HTTP/1.1 200 OK\r\nno colon\r\n\r\n", 0, "", ""},
	{"HTTP/1.1 200 OK\r\n: empty name\r\n\r\n", 0, "", ""},
	{"HTTP/1.1 200 OK\r\nBad Name: x\r\n\r\n", 0, "", ""},
	{"HTTP/1.1 403 Forbidden\r\nContent-Length: -1\r\n\r\n", 0, "", ""},
	{"HTTP/1.1 403 Forbidden\r\nContent-Length: 1x\r\n\r\n", 0, "", ""},
	{"HTTP/1.1 403 Forbidden\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab", 0, "", ""},
	{"HTTP/1.1 200 OK\r\nX: " + strings.Repeat("a", maxConnectLine) + "\r\n\r\n", 0, "", ""},
	{"HTTP/1.1 200 OK\r\n" + strings.Repeat("X: y\r\n", maxConnectHeaders) + "\r\n", 0, "", ""},
}

func TestReadConnectResponse(t *testing.T) {
	for _, c := range connectResponseCases {
		br := bufio.NewReaderSize(strings.NewReader(c.in), maxConnectLine)
		code, body, err := readConnectResponse(br)
		rest, _ := io.ReadAll(br)
		if c.code == 0 {
			if err == nil {
				t.Errorf("readConnectResponse(%q) = %d, %q; want an error", c.in, code, body)
			}
			continue
		}
		if err != nil || code != c.code || string(body) != c.body || string(rest) != c.rest {
			t.Errorf("readConnectResponse(%q) = %d, %q, %v, rest %q; want %d, %q, rest %q", c.in, code, body, err, rest, c.code, c.body, c.rest)
		}
	}
}

func FuzzReadConnectResponse(f *testing.F) {
	for _, c := range connectResponseCases {
		f.Add([]byte(c.in))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		br := bufio.NewReaderSize(bytes.NewReader(data), maxConnectLine)
		code, body, err := readConnectResponse(br)
		rest, _ := io.ReadAll(br)
		if err != nil {
			return
		}
		if code < 200 || code > 599 || len(body) > maxRefusalBody {
			t.Fatalf("%q: code %d, body of %d bytes", data, code, len(body))
		}
		head := len(data) - len(rest) - len(body)
		if code/100 == 2 && len(body) != 0 {
			t.Fatalf("%q: a success with a body %q", data, body)
		}
		// Nothing after the head is lost: it is the body, or the tunnel's.
		if head < 4 || string(data[head-4:head]) != "\r\n\r\n" || !bytes.Equal(data[head:], append(append([]byte{}, body...), rest...)) {
			t.Fatalf("%q: head of %d bytes, body %q, rest %q", data, head, body, rest)
		}
	})
}

// A half-close of the local side reaches the peer, which still answers;
// the peer's end ends the relay.
func TestSpliceHalfClose(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		got, _ := io.ReadAll(c) // until the half-close
		fmt.Fprintf(c, "got %q", got)
	}()
	up, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer up.Close()
	var out bytes.Buffer
	done := make(chan error, 1)
	go func() { done <- splice(strings.NewReader("hello"), &out, up, up) }()
	select {
	case err := <-done:
		if err != nil || out.String() != `got "hello"` {
			t.Fatalf("splice = %v, out %q", err, out.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("splice did not end after the peer answered and closed")
	}
}

// fakeProxy answers each connection's CONNECT with answer, then echoes
// upper-cased bytes until the client half-closes; it records the request
// heads.
func fakeProxy(t *testing.T, answer string) (addr string, heads chan string) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	heads = make(chan string, 4)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			br := bufio.NewReader(c)
			var head strings.Builder
			for {
				line, err := br.ReadString('\n')
				head.WriteString(line)
				if err != nil || line == "\r\n" {
					break
				}
			}
			heads <- head.String()
			io.WriteString(c, answer)
			if strings.HasPrefix(answer, "HTTP/1.1 200") {
				rest, _ := io.ReadAll(br)
				c.Write(bytes.ToUpper(rest))
			}
			c.Close()
		}
	}()
	return l.Addr().String(), heads
}

func TestEgressConnect(t *testing.T) {
	run := func(stdin string, args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		code := runEgressConnect(context.Background(), &env{args: args, stdin: strings.NewReader(stdin), stdout: &out, stderr: &errb})
		return code, out.String(), errb.String()
	}
	addr, heads := fakeProxy(t, "HTTP/1.1 200 Connection established\r\n\r\n")
	t.Setenv("HTTPS_PROXY", "http://"+addr)
	code, out, errs := run("ping", "git.example.com", "22")
	if code != 0 || out != "PING" || errs != "" {
		t.Errorf("through the tunnel: code %d, out %q, stderr %q", code, out, errs)
	}
	if h := <-heads; h != "CONNECT git.example.com:22 HTTP/1.1\r\nHost: git.example.com:22\r\n\r\n" {
		t.Errorf("request %q", h)
	}

	refusal := "coily: host git.example.com:2222 is not in the egress allowlist of rule \"git\"; ask the owner to add it\n"
	addr, _ = fakeProxy(t, fmt.Sprintf("HTTP/1.1 403 Forbidden\r\nContent-Length: %d\r\n\r\n%s", len(refusal)+8, refusal+"\x1b[2Jmore"))
	t.Setenv("HTTPS_PROXY", "http://"+addr)
	code, out, errs = run("ping", "git.example.com", "2222")
	if want := refusal + `\x1b[2Jmore` + "\n"; code != 1 || out != "" || errs != want {
		t.Errorf("refused: code %d, out %q, stderr %q; want 1, stderr %q", code, out, errs, want)
	}

	t.Setenv("HTTPS_PROXY", "http://proxy.example:3128")
	if code, _, errs := run("", "git.example.com", "22"); code != 2 || !strings.Contains(errs, "not the egress bridge") {
		t.Errorf("foreign proxy: code %d, stderr %q", code, errs)
	}
	if code, _, _ := run("", "git.example.com"); code != 2 {
		t.Errorf("one argument: code %d", code)
	}
}

// GIT_SSH_COMMAND survives both shells (git's, then ssh's for the
// ProxyCommand, after ssh's %-expansion) whatever the executable's path.
func TestGitSSHCommand(t *testing.T) {
	bin := t.TempDir()
	// A stand-in for ssh that prints its arguments, one a line.
	if err := os.WriteFile(filepath.Join(bin, "ssh"), []byte("#!/bin/sh\nfor a; do printf '%s\\n' \"$a\"; done\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	canary := filepath.Join(bin, "pwned")
	self := `/run/co ily/it's "$(touch ` + canary + `)" 100%h`
	cmd, err := gitSSHCommand(self, "/run/coily/known_hosts")
	if err != nil {
		t.Fatal(err)
	}
	// As git runs it.
	c := exec.Command("/bin/sh", "-c", cmd+` "$@"`, cmd, "-p", "2222", "git@host", "git-upload-pack '/r.git'")
	c.Env = []string{"PATH=" + bin + ":/usr/bin:/bin"}
	got, err := c.Output()
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"-F", "/dev/null", "-o", "UserKnownHostsFile=/run/coily/known_hosts", "-o", "GlobalKnownHostsFile=/dev/null",
		"-o", "StrictHostKeyChecking=yes", "-o", "", "-p", "2222", "git@host", "git-upload-pack '/r.git'"}
	args := strings.Split(strings.TrimSuffix(string(got), "\n"), "\n")
	if len(args) != len(want) {
		t.Fatalf("ssh got %q", args)
	}
	proxy, ok := strings.CutPrefix(args[9], "ProxyCommand=")
	args[9] = ""
	if !ok || strings.Join(args, "\n") != strings.Join(want, "\n") {
		t.Fatalf("ssh got %q, want %q", args, want)
	}
	// As ssh runs the ProxyCommand: %h and %p expanded, %% made %.
	proxy = strings.NewReplacer("%%", "%", "%h", "host.example", "%p", "2222").Replace(proxy)
	c = exec.Command("/bin/sh", "-c", "printf '%s\\n' "+proxy)
	out, err := c.Output()
	if err != nil {
		t.Fatal(err)
	}
	if want := self + "\n" + EgressConnectCommand + "\nhost.example\n2222\n"; string(out) != want {
		t.Errorf("ProxyCommand runs %q, want %q", out, want)
	}
	if _, err := os.Stat(canary); err == nil {
		t.Error("a shell ran a command substitution from the executable's path")
	}

	for _, bad := range []string{"known_hosts", "/run/../known_hosts", "/run/known hosts", "/run/%d/known_hosts", "/run/~/k", "/run/k\n", "/run/'k"} {
		if _, err := gitSSHCommand("/run/coily/bridge", bad); err == nil {
			t.Errorf("known hosts path %q accepted", bad)
		}
	}
}
