package keystore

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/vault/api"

	"coily.dev/coily/internal/poll"
)

// sinkWrite writes token to path as Vault Agent's file sink does: a new
// file renamed over the old one.
func sinkWrite(t *testing.T, path, token string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(token+"\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// A token file that Vault Agent's sink rewrites (by rename) is followed:
// when the old token is revoked, the 403 makes the backend read the file
// again at once and go on with the new token; a refusal by policy does the
// same; a change is also noticed within a second without any refusal; a
// token revoked with the file unchanged fails every fetch until the file
// holds a fresh one, which is then picked up without a restart.
func TestVaultTokenFileRotated(t *testing.T) {
	e := newVaultEnv(t)
	e.write("coily/github", map[string]any{"token": canaryToken})
	e.write("other/secret", map[string]any{"token": canaryOther})
	if err := e.root.Sys().PutPolicy("other", `path "secret/data/other/*" { capabilities = ["read"] }`); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "vault-token")
	tokA := e.token(&api.TokenCreateRequest{})
	sinkWrite(t, file, tokA)
	t.Setenv("VAULT_TOKEN", "")
	v := e.vault(VaultConfig{TokenFile: file})
	e.want(v, "vault:secret/coily/github#token", canaryToken)

	// Rotated, the old token revoked at once: the 403 re-reads the file.
	tokB := e.token(&api.TokenCreateRequest{})
	sinkWrite(t, file, tokB)
	if err := e.root.Auth().Token().RevokeOrphan(tokA); err != nil {
		t.Fatal(err)
	}
	e.want(v, "vault:secret/coily/github#token", canaryToken)

	// Rotated to a token of another policy: the policy's 403 re-reads it.
	tokC := e.token(&api.TokenCreateRequest{Policies: []string{"other"}})
	sinkWrite(t, file, tokC)
	e.want(v, "vault:secret/other/secret#token", canaryOther)
	e.expect(v, "vault:secret/coily/github#token", ErrDenied)

	// Rotated with nothing refused: noticed by a fetch a second after
	// the last look.
	tokD := e.token(&api.TokenCreateRequest{})
	sinkWrite(t, file, tokD)
	poll.Until(t, 5*time.Second, "the new token to be used", func() bool {
		e.want(v, "vault:secret/coily/github#token", canaryToken)
		v.mu.Lock()
		defer v.mu.Unlock()
		return v.sess != nil && v.sess.token == tokD || v.staticToken == tokD
	})
	e.want(v, "vault:secret/coily/github#token", canaryToken)
	if n := strings.Count(e.logs.String(), "vault token file holds a new token"); n != 3 {
		t.Errorf("%d token changes logged, want 3", n)
	}

	// Revoked with the file unchanged: every fetch fails, saying what to
	// do, until the file holds a fresh token.
	if err := e.root.Auth().Token().RevokeOrphan(tokD); err != nil {
		t.Fatal(err)
	}
	e.expect(v, "vault:secret/coily/github#token", ErrRenewal, "write a fresh token to "+file)
	e.expect(v, "vault:secret/coily/github#token", ErrRenewal)
	sinkWrite(t, file, e.token(&api.TokenCreateRequest{}))
	poll.Until(t, 5*time.Second, "a fetch to work with the fresh token", func() bool {
		_, err := e.fetch(v, "vault:secret/coily/github#token")
		return err == nil
	})

	// A file that stops being readable keeps the token in use.
	if err := os.WriteFile(file, []byte("two tokens\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if !v.refreshToken(true) {
		e.want(v, "vault:secret/coily/github#token", canaryToken)
	} else {
		t.Fatal("an unusable token file replaced the token")
	}
	if !strings.Contains(e.logs.String(), "vault token file unreadable; keeping the token in use") {
		t.Error("the unreadable token file was not logged")
	}
}

// Token files that hold no single token, or are no regular file, are
// refused (at start: NewVault fails naming the file).
func TestReadTokenFile(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for name, path := range map[string]string{
		"empty":      write("empty", ""),
		"blank":      write("blank", " \n\t\n"),
		"two tokens": write("two", "hvs.a hvs.b\n"),
		"two lines":  write("lines", "hvs.a\nhvs.b\n"),
		"too large":  write("large", strings.Repeat("a", maxTokenFile+1)),
		"directory":  dir,
		"fifo":       fifo,
		"missing":    filepath.Join(dir, "missing"),
	} {
		done := make(chan error, 1)
		go func() { _, _, err := readTokenFile(path); done <- err }()
		select {
		case err := <-done:
			if err == nil || !strings.Contains(err.Error(), path) {
				t.Errorf("%s: %v, want an error naming the file", name, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: readTokenFile blocked", name)
		}
	}
	if tok, fi, err := readTokenFile(write("ok", "  hvs.CANARY-ok\r\n")); err != nil || tok != "hvs.CANARY-ok" || fi == nil {
		t.Fatalf("a token with white space around it: %q, %v", tok, err)
	}
}

// wrapSecretID returns a wrapping token for a new secret id of role coily.
func (e *vaultEnv) wrapSecretID(path string) string {
	e.t.Helper()
	c := e.srv.Client(e.t, e.srv.RootToken)
	c.SetWrappingLookupFunc(func(string, string) string { return "5m" })
	sec, err := c.Logical().Write(path, nil)
	if err != nil || sec == nil || sec.WrapInfo == nil {
		e.t.Fatalf("wrapped write of %s: %v", path, err)
	}
	e.secrets = append(e.secrets, sec.WrapInfo.Token)
	return sec.WrapInfo.Token
}

// A response-wrapped secret id is looked up (it must wrap an AppRole
// secret id of the mount), unwrapped once, its file removed, the secret id
// kept in memory for later logins. A spent wrapping token, or one that
// wraps anything else, fails the start; the latter is left wrapped.
func TestVaultWrappedSecretID(t *testing.T) {
	e := newVaultEnv(t)
	e.write("coily/github", map[string]any{"token": canaryToken})
	roleID, _ := e.approle("1h", "24h")
	dir := t.TempDir()
	wt := e.wrapSecretID("auth/approle/role/coily/secret-id")
	file := filepath.Join(dir, "wrapped")
	if err := os.WriteFile(file, []byte(wt+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := VaultConfig{Auth: VaultAuthAppRole, RoleID: roleID, WrappedSecretIDFile: file}
	v := e.vault(cfg)
	e.want(v, "vault:secret/coily/github#token", canaryToken)
	if _, err := os.Stat(file); !os.IsNotExist(err) {
		t.Fatalf("the wrapped secret id file is still there: %v", err)
	}
	e.secrets = append(e.secrets, v.secretID)
	// Logging in again (the token revoked) uses the secret id in memory.
	v.mu.Lock()
	tok := v.sess.token
	v.mu.Unlock()
	if err := e.root.Auth().Token().RevokeOrphan(tok); err != nil {
		t.Fatal(err)
	}
	e.want(v, "vault:secret/coily/github#token", canaryToken)

	start := func(content string) error {
		t.Helper()
		if err := os.WriteFile(file, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		cfg.Logger = nil
		w, err := NewVault(context.Background(), cfg)
		if err == nil {
			w.Close()
			return nil
		}
		e.checkNoLeak(err.Error(), "NewVault error")
		return err
	}
	// Spent.
	if err := start(wt); !errors.Is(err, ErrDenied) || !strings.Contains(err.Error(), "was spent before coily looked it up") || !strings.Contains(err.Error(), "intercepted") {
		t.Fatalf("a spent wrapping token: %v", err)
	}
	// Wrapping something else: a KV read, another mount's secret id.
	e.write("coily/wrapped", map[string]any{"token": canaryOther})
	if err := e.root.Sys().EnableAuthWithOptions("approle2", &api.EnableAuthOptions{Type: "approle"}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.root.Logical().Write("auth/approle2/role/coily", map[string]any{"token_policies": []string{"coily"}}); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"secret/data/coily/wrapped", "auth/approle2/role/coily/secret-id"} {
		c := e.srv.Client(t, e.srv.RootToken)
		c.SetWrappingLookupFunc(func(string, string) string { return "5m" })
		var other string
		if strings.HasPrefix(path, "secret/") {
			sec, err := c.Logical().Read(path)
			if err != nil || sec.WrapInfo == nil {
				t.Fatalf("wrapped read: %v", err)
			}
			other = sec.WrapInfo.Token
			e.secrets = append(e.secrets, other)
		} else {
			other = e.wrapSecretID(path)
		}
		err := start(other)
		if !errors.Is(err, ErrDenied) || !strings.Contains(err.Error(), "does not wrap an AppRole secret id of auth/approle/") {
			t.Fatalf("a token wrapping %s: %v", path, err)
		}
		if _, err := e.root.Logical().Write("sys/wrapping/lookup", map[string]any{"token": other}); err != nil {
			t.Fatalf("the token wrapping %s was unwrapped: %v", path, err)
		}
		if _, err := os.Stat(file); err != nil {
			t.Fatalf("the file of a refused wrapping token was removed: %v", err)
		}
	}
	// Both files, or neither.
	for _, c := range []VaultConfig{
		{Auth: VaultAuthAppRole, RoleID: roleID, WrappedSecretIDFile: file, SecretIDFile: file},
		{Auth: VaultAuthAppRole, RoleID: roleID},
	} {
		if _, err := NewVault(context.Background(), c); err == nil || !strings.Contains(err.Error(), "either") {
			t.Errorf("NewVault(%+v): %v", c, err)
		}
	}
}

func TestSecretIDPath(t *testing.T) {
	for p, want := range map[string]bool{
		"auth/approle/role/coily/secret-id":          true,
		"auth/approle/role/x/secret-id":              true,
		"auth/approle/role//secret-id":               false,
		"auth/approle/role/a/b/secret-id":            false,
		"auth/approle/role/coily/custom-secret-id":   false,
		"auth/approle/role/coily/secret-id/lookup":   false,
		"auth/approle2/role/coily/secret-id":         false,
		"auth/approle/login":                         false,
		"secret/data/coily/x":                        false,
		"":                                           false,
		"sys/wrapping/wrap":                          false,
		"auth/approle/role/coily/secret-id\n":        false,
		"xauth/approle/role/coily/secret-id":         false,
		"auth/approle/role/coily/secret-idsecret-id": false,
	} {
		if got := secretIDPath(p, "approle"); got != want {
			t.Errorf("secretIDPath(%q) = %v, want %v", p, got, want)
		}
	}
}
