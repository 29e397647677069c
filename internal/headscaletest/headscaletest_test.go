package headscaletest

import (
	"strings"
	"testing"
)

// TestStart starts headscale, creates a user and keys, and checks that
// the CLI answers over the server's socket.
func TestStart(t *testing.T) {
	s := Start(t, Options{Policy: `{"tagOwners": {"tag:agent": ["alice@"]}, "grants": [{"src": ["*"], "dst": ["*"], "ip": ["*"]}]}`})
	if !strings.HasPrefix(s.URL, "https://127.0.0.1:") {
		t.Fatalf("URL %q", s.URL)
	}
	u := s.CreateUser(t, "alice")
	if u.Name != "alice" {
		t.Fatalf("user %+v", u)
	}
	if k := s.AuthKey(t, Key{User: u.ID, Reusable: true}); k == "" {
		t.Fatal("no key")
	}
	if k := s.AuthKey(t, Key{Tags: []string{"tag:agent"}, Ephemeral: true}); k == "" {
		t.Fatal("no tagged key")
	}
	if n := s.Nodes(t); len(n) != 0 {
		t.Fatalf("nodes before any joined: %+v", n)
	}
}
