package keystore

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Who may own and access a token file: the server's user or root owns
// it; its group may read it, not write it; others may do neither.
func TestTokenFileAccess(t *testing.T) {
	const self = 1000
	for _, c := range []struct {
		perm  os.FileMode
		owner int
		want  string // "" accepted; else part of the error
	}{
		{0o600, self, ""},
		{0o400, self, ""},
		{0o640, self, ""},
		{0o440, self, ""},
		{0o600, 0, ""},
		{0o640, 0, ""},
		{0o644, self, "open to others: chmod 0600"},
		{0o604, self, "open to others"},
		{0o602, self, "open to others"},
		{0o666, self, "open to others"},
		{0o777, 0, "open to others"},
		{0o660, self, "writable by its group: chmod 0600"},
		{0o620, self, "writable by its group"},
		{0o600, 1001, "owned by uid 1001, neither this server's user (uid 1000) nor root"},
		{0o640, 65534, "owned by uid 65534"},
	} {
		err := tokenFileAccess("/run/vault/token", c.perm, c.owner, self)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%04o owned by %d: %v", c.perm, c.owner, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "/run/vault/token")):
			t.Errorf("%04o owned by %d: %v, want %q naming the file", c.perm, c.owner, err, c.want)
		}
	}
	if err := tokenFileAccess("/t", 0o600, 1000, 0); err == nil {
		t.Error("a root server read a token file of uid 1000")
	}
}

// readTokenFile applies the rule to real files, before reading them; as
// root, to a file chowned to another user too.
func TestReadTokenFileModes(t *testing.T) {
	dir := t.TempDir()
	for perm, ok := range map[os.FileMode]bool{0o600: true, 0o640: true, 0o400: true, 0o644: false, 0o660: false, 0o606: false, 0o666: false} {
		p := filepath.Join(dir, "token-"+perm.String())
		if err := os.WriteFile(p, []byte("hvs.CANARY-mode\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, perm); err != nil {
			t.Fatal(err)
		}
		tok, _, err := readTokenFile(p)
		if (err == nil) != ok || ok && tok != "hvs.CANARY-mode" || !ok && (!strings.Contains(err.Error(), p) || strings.Contains(err.Error(), "CANARY")) {
			t.Errorf("%04o: %q, %v", perm, tok, err)
		}
	}
	if os.Geteuid() == 0 {
		p := filepath.Join(dir, "theirs")
		if err := os.WriteFile(p, []byte("hvs.CANARY-mode\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(p, 4242, 4242); err != nil {
			t.Fatal(err)
		}
		if _, _, err := readTokenFile(p); err == nil || !strings.Contains(err.Error(), "owned by uid 4242") {
			t.Errorf("a file of uid 4242: %v", err)
		}
	}
}
