package keystore

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/vault/api"

	"coily.dev/coily/internal/poll"
)

// A token file rewritten in place (truncated, then written) while its old
// token is revoked: a fetch that reads it empty fails, and the backend
// recovers at a later fetch once the file holds the new token, without a
// restart, even when the rewritten file looks like the one last read
// (inode, size and modification time): after a failed read, or while the
// backend is failed, the file is read again at each check.
func TestVaultTokenFileRewriteRace(t *testing.T) {
	e := newVaultEnv(t)
	e.write("coily/github", map[string]any{"token": canaryToken})
	file := filepath.Join(t.TempDir(), "vault-token")
	// Every token is written padded to one size: a rewrite changes
	// neither the inode nor the size.
	padded := func(tok string) []byte { return []byte(tok + strings.Repeat(" ", 256-len(tok)) + "\n") }
	if err := os.WriteFile(file, padded(e.token(&api.TokenCreateRequest{})), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("VAULT_TOKEN", "")
	v := e.vault(VaultConfig{TokenFile: file})
	e.want(v, "vault:secret/coily/github#token", canaryToken)

	for round := 0; round < 3; round++ {
		v.mu.Lock()
		old := v.staticToken
		v.mu.Unlock()
		before, err := os.Stat(file)
		if err != nil {
			t.Fatal(err)
		}
		if err := e.root.Auth().Token().RevokeOrphan(old); err != nil {
			t.Fatal(err)
		}
		// The sink has truncated the file: the fetch sees no token.
		if err := os.Truncate(file, 0); err != nil {
			t.Fatal(err)
		}
		if _, err := e.fetch(v, "vault:secret/coily/github#token"); err == nil {
			t.Fatal("fetched with a revoked token and an empty token file")
		}
		// It writes the new token in place: the same inode and size as
		// the old one's file, and its modification time (a writer that
		// keeps it, or a clock of coarse granularity).
		if err := os.WriteFile(file, padded(e.token(&api.TokenCreateRequest{})), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(file, time.Time{}, before.ModTime()); err != nil {
			t.Fatal(err)
		}
		poll.Until(t, 10*time.Second, "a fetch to work with the rewritten token file", func() bool {
			_, err := e.fetch(v, "vault:secret/coily/github#token")
			return err == nil
		})
	}
}
