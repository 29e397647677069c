package keystore

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"coily.dev/coily/internal/keyringtest"
)

// Keystore.Check: a backend not configured fails; the file backend is
// checked for the file's safety and syntax, never quoting a value.
func TestCheckFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "credentials")
	f := NewFile(path)
	k := New(Config{Backends: map[string]Backend{BackendFile: f}})
	ctx := context.Background()
	if err := k.Check(ctx, []string{BackendFile}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Check of a missing file = %v, want ErrNotFound", err)
	}
	if err := os.WriteFile(path, []byte("github=s3cr3t-canary\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := k.Check(ctx, []string{BackendFile}); err != nil {
		t.Fatalf("Check of a good file: %v", err)
	}
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	err := k.Check(ctx, []string{BackendFile})
	if !errors.Is(err, ErrDenied) || strings.Contains(err.Error(), "s3cr3t") {
		t.Fatalf("Check of a world-readable file = %v, want ErrDenied without the value", err)
	}
	if err := k.Check(ctx, []string{BackendVault}); !errors.Is(err, ErrNoBackend) || !strings.Contains(err.Error(), "vault") {
		t.Fatalf("Check of an unconfigured backend = %v, want ErrNoBackend naming it", err)
	}
	if err := (*Keystore)(nil).Check(ctx, nil); err != nil {
		t.Fatalf("Check of nothing = %v", err)
	}
}

// Vault.Check looks the token up against a real Vault, and reports a
// Vault that went away as unreachable.
func TestCheckVault(t *testing.T) {
	e := newVaultEnv(t)
	t.Setenv("VAULT_TOKEN", e.srv.RootToken)
	t.Setenv("VAULT_MAX_RETRIES", "0")
	p := e.srv.Proxy(t)
	t.Setenv("VAULT_ADDR", p.Addr)
	v := e.vault(VaultConfig{})
	k := New(Config{Backends: map[string]Backend{BackendVault: v}, Timeout: 3 * time.Second})
	if err := k.Check(context.Background(), []string{BackendVault}); err != nil {
		t.Fatalf("Check of a reachable Vault: %v", err)
	}
	p.Cut()
	err := k.Check(context.Background(), []string{BackendVault})
	if !errors.Is(err, ErrUnreachable) {
		t.Fatalf("Check of a Vault gone away = %v, want ErrUnreachable", err)
	}
	e.checkNoLeak(err.Error(), "Check error")
}

// Keychain.Check asks the real Secret Service whether its collection is
// unlocked, without asking for an item.
func TestCheckKeychain(t *testing.T) {
	keyringtest.Start(t)
	k := New(Config{Backends: map[string]Backend{BackendKeychain: NewKeychain()}})
	if err := k.Check(context.Background(), []string{BackendKeychain}); err != nil {
		t.Fatalf("Check of an unlocked keychain: %v", err)
	}
	keyringtest.Lock(t)
	if err := k.Check(context.Background(), []string{BackendKeychain}); !errors.Is(err, ErrLocked) {
		t.Fatalf("Check of a locked keychain = %v, want ErrLocked", err)
	}
	keyringtest.Unlock(t)
	if err := k.Check(context.Background(), []string{BackendKeychain}); err != nil {
		t.Fatalf("Check after unlocking: %v", err)
	}
}
