package gitproxy

import (
	"bytes"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
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
	dir := t.TempDir()
	fake := filepath.Join(dir, "git")
	script := "#!/bin/sh\nprintf 'started\\n'\nwc -c\n"
	if err := os.WriteFile(fake, []byte(script), 0o700); err != nil {
		t.Fatal(err)
	}
	p := &Proxy{git: fake, log: slog.New(slog.DiscardHandler), home: dir}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		req, err := backendRequest(r, ReceivePack, 1<<30)
		if err != nil {
			t.Error(err)
			return
		}
		p.serveGit(w, req, dir, ReceivePack, false, nil)
	}))
	defer srv.Close()
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
