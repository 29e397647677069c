package gitproxy

import (
	"bufio"
	"bytes"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestGitReadsTheWholeBodyAfterItsFirstWrite: receive-pack writes to its
// output (progress, keepalives on side-band) while it still reads the
// pack. Go's HTTP/1 server, once a handler's first write flushes the
// response's headers, throws away what is left of the request body (up to
// 256 KiB) unless the handler asked for full duplex: git then read an
// early EOF and the push failed ("fatal: early EOF", "unpack index-pack
// abnormal exit"), seen under load in CI. The stand-in for git writes a
// byte first, then counts what it reads.
func TestGitReadsTheWholeBodyAfterItsFirstWrite(t *testing.T) {
	srv, _ := fakeGitServer(t, "#!/bin/sh\nprintf 'started\\n'\nwc -c\n")
	for _, size := range []int{1 << 10, 200 << 10, 1 << 20} {
		body := bytes.Repeat([]byte("P"), size)
		resp, err := http.Post(srv.URL, "application/x-git-receive-pack-request", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		out, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		got := strings.Fields(strings.TrimPrefix(string(out), "started\n"))
		if len(got) != 1 || got[0] != strconv.Itoa(size) {
			t.Errorf("a body of %d bytes: git read %q", size, out)
		}
	}
}

// TestGitEndingEarlyFreesTheHandler: git may end before it has read the
// whole body (a push refused at its first command). An agent that then
// trickles the rest, or sends nothing more, must not hold the handler (and
// its push slot) until the read timeout: exec's copy of the body into
// git's stdin stayed blocked on the agent's connection, and cmd.Run
// waited for it. The stand-in for git answers and exits without reading;
// the client sends 1 KiB of a 100 KB body, then nothing.
func TestGitEndingEarlyFreesTheHandler(t *testing.T) {
	srv, done := fakeGitServer(t, "#!/bin/sh\nprintf 'refused\\n'\n")
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	head := "POST /repo.git/git-receive-pack HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-git-receive-pack-request\r\nContent-Length: 100000\r\n\r\n"
	if _, err := conn.Write(append([]byte(head), bytes.Repeat([]byte("P"), 1<<10)...)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the handler still waits on the agent's body 30 s after git ended")
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(resp.Body)
	if !strings.Contains(string(out), "refused") {
		t.Errorf("the agent read %q, not git's answer", out)
	}
}

// fakeGitServer serves receive-pack POSTs through serveGit with script as
// git; done is closed as each handler returns.
func fakeGitServer(t *testing.T, script string) (*httptest.Server, chan struct{}) {
	dir := t.TempDir()
	fake := filepath.Join(dir, "git")
	if err := os.WriteFile(fake, []byte(script), 0o700); err != nil {
		t.Fatal(err)
	}
	p := &Proxy{git: fake, log: slog.New(slog.DiscardHandler), home: dir}
	done := make(chan struct{}, 16)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() { done <- struct{}{} }()
		req, err := backendRequest(r, ReceivePack, 1<<30)
		if err != nil {
			t.Error(err)
			return
		}
		p.serveGit(w, req, dir, ReceivePack, false, nil)
	}))
	t.Cleanup(srv.Close)
	return srv, done
}
