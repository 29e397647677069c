package access

import (
	"context"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"coily.dev/coily/refusal"
)

type oneUser struct{}

func (oneUser) LookupUID(uid int) (string, []string, error) { return "alice", nil, nil }

// A git request on the local socket is identified by the kernel's peer
// credentials (LocalConnContext), never by its remote address; a lockout
// refuses it, audited.
func TestGitLocalSocketIdentity(t *testing.T) {
	g := newTestGate(t, tablePolicy)
	sock := filepath.Join(t.TempDir(), "git.sock")
	l, err := ListenLocal(sock, "")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{ConnContext: LocalConnContext(oneUser{}), Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, err := g.Admit(r.Context(), Git(r.RemoteAddr, GitMethodPush))
		if err != nil {
			http.Error(w, string(refusal.As(err).Code), http.StatusForbidden)
			return
		}
		c, _ := CallerFrom(ctx)
		io.WriteString(w, c.Principal+" "+c.Transport)
	})}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	client := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	get := func() string {
		resp, err := client.Get("http://coily/git/")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	want := "local:alice local" // alice is a local operator by name
	if got := get(); got != want {
		t.Fatalf("caller = %q, want %q", got, want)
	}
	g.mu.Lock()
	g.locked = true
	g.mu.Unlock()
	if got := get(); !strings.Contains(got, string(refusal.LockoutActive)) {
		t.Fatalf("under a lockout: %q", got)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if n := len(g.records); n != 1 || g.records[0].Method != GitMethodPush || g.records[0].Code != string(refusal.LockoutActive) {
		t.Fatalf("records: %+v", g.records)
	}
}

// Without the local connection's credentials, a git request is a tailnet
// peer's: a loopback address is refused, not taken for a local caller.
func TestGitNotLocalIsTailnet(t *testing.T) {
	g := newTestGate(t, tablePolicy)
	_, err := g.Admit(context.Background(), Git("127.0.0.1:5555", GitMethodFetch))
	if refusal.As(err).Code != refusal.Unauthenticated {
		t.Fatalf("Admit = %v, want unauthenticated", err)
	}
}
