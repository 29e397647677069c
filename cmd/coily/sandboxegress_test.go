package main

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"coily.dev/coily/policy"
	"coily.dev/coily/sandbox"
)

// The proxy sandbox exec starts serves its socket from a private
// directory, answers by the flags' allowlist, and stop returns its rows
// and removes the directory.
func TestOwnProxy(t *testing.T) {
	t.Setenv("TMPDIR", shortDir(t))
	s := startEgressServers(t)
	pp := port(t, s.plain)
	eg, err := policy.ParseEgress(policy.EgressSpec{Allow: []string{"localhost:" + pp}, CIDRs: []string{"127.0.0.0/8"}})
	if err != nil {
		t.Fatal(err)
	}
	o, err := startOwnProxy(eg, sandbox.User{})
	if err != nil {
		t.Fatal(err)
	}
	// Private; as root, the sandbox's user may pass (0711) and the socket
	// is its own (bubblewrap, running as that user, binds it by path).
	mode, owner := os.FileMode(0o700), os.Geteuid()
	if os.Geteuid() == 0 {
		mode, owner = 0o711, sandbox.DefaultUser().UID
	}
	if fi, err := os.Stat(filepath.Dir(o.socket)); err != nil || fi.Mode().Perm() != mode || filepath.Dir(o.socket) != o.dir {
		t.Fatalf("socket directory: %v, %v", fi.Mode(), err)
	}
	if fi, err := os.Lstat(o.socket); err != nil || int(fi.Sys().(*syscall.Stat_t).Uid) != owner {
		t.Fatalf("socket owner: %v, want uid %d", err, owner)
	}
	get := func(host string) int {
		c, err := net.Dial("unix", o.socket)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "GET http://%s:%s/ HTTP/1.1\r\nHost: %s:%s\r\n\r\n", host, pp, host, pp)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := get("localhost"); got != 200 {
		t.Errorf("allowed host: status %d", got)
	}
	if got := get("other.example"); got != 403 {
		t.Errorf("host outside the allowlist: status %d", got)
	}
	rows, _ := o.stop()
	if len(rows) != 2 || rows[0].Host != "localhost" || rows[0].Decision != "allow" || rows[0].BytesDown == 0 ||
		rows[1].Host != "other.example" || rows[1].Decision != "deny" || rows[1].Reason != "not-allowlisted" {
		t.Fatalf("rows %+v", rows)
	}
	if _, err := os.Stat(o.dir); !os.IsNotExist(err) {
		t.Fatalf("the socket directory outlives stop: %v", err)
	}
}
