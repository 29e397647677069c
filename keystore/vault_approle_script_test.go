package keystore

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestApproleScript runs deploy/vault-approle.sh against a Vault dev
// server, then logs in with the role id it prints and the secret id file
// it writes, and reads a secret under secret/coily/ (and only there). The
// role's secret ids expire (720h unless told). With --wrap-ttl the file
// holds a wrapping token instead, which coily unwraps once.
func TestApproleScript(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("deploy/vault-approle.sh needs curl")
		}
		t.Skip("deploy/vault-approle.sh needs curl")
	}
	e := newVaultEnv(t)
	e.write("coily/github", map[string]any{"token": canaryToken})
	e.write("other/secret", map[string]any{"token": canaryOther})
	script, err := filepath.Abs(filepath.Join("..", "deploy", "vault-approle.sh"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	secretIDFile := filepath.Join(dir, "secret-id")

	run := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(script, append([]string{"--secret-id-file", secretIDFile}, args...)...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "VAULT_ADDR="+e.srv.Addr, "VAULT_TOKEN="+e.srv.RootToken, "VAULT_NAMESPACE=")
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("vault-approle.sh: %v\n%s", err, stderr.String())
		}
		b, err := os.ReadFile(secretIDFile)
		if err != nil {
			t.Fatal(err)
		}
		secretID := strings.TrimSpace(string(b))
		e.secrets = append(e.secrets, secretID)
		out := stdout.String() + stderr.String()
		if secretID == "" || strings.Contains(out, secretID) {
			t.Fatalf("secret id empty or printed: %s", out)
		}
		e.checkNoLeak(out, "script output")
		t.Logf("vault-approle.sh: %s", strings.TrimSpace(stderr.String()))
		return strings.TrimSpace(stdout.String())
	}
	roleID := run() // the default secret_id_ttl
	if fi, err := os.Stat(secretIDFile); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("secret id file: %v, mode %v; want 0600", err, fi.Mode())
	}
	// Again: idempotent, same role id, a fresh secret id.
	if again := run(); again != roleID {
		t.Fatalf("second run printed role id %q, first %q", again, roleID)
	}

	sec, err := e.root.Logical().Read("auth/approle/role/coily")
	if err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]string{"token_ttl": "3600", "token_max_ttl": "86400", "secret_id_ttl": "2592000"} {
		if v := sec.Data[k]; v == nil || v.(interface{ String() string }).String() != want {
			t.Errorf("%s = %v, want %s", k, v, want)
		}
	}

	v := e.vault(VaultConfig{Auth: VaultAuthAppRole, RoleID: roleID, SecretIDFile: secretIDFile})
	e.want(v, "vault:secret/coily/github#token", canaryToken)
	e.expect(v, "vault:secret/other/secret#token", ErrDenied)

	// Wrapped: the file holds a wrapping token for the secret-id request,
	// which coily checks, unwraps once, and removes.
	run("--wrap-ttl", "5m", "--secret-id-ttl", "1h")
	sec, err = e.root.Logical().Read("auth/approle/role/coily")
	if err != nil || sec.Data["secret_id_ttl"].(interface{ String() string }).String() != "3600" {
		t.Fatalf("secret_id_ttl after --secret-id-ttl 1h: %v %v", sec, err)
	}
	b, err := os.ReadFile(secretIDFile)
	if err != nil {
		t.Fatal(err)
	}
	wrapping := strings.TrimSpace(string(b))
	look, err := e.root.Logical().Write("sys/wrapping/lookup", map[string]any{"token": wrapping})
	if err != nil || look.Data["creation_path"] != "auth/approle/role/coily/secret-id" {
		t.Fatalf("the file does not hold a wrapping token of the secret-id request: %v %v", look, err)
	}
	w := e.vault(VaultConfig{Auth: VaultAuthAppRole, RoleID: roleID, WrappedSecretIDFile: secretIDFile})
	e.want(w, "vault:secret/coily/github#token", canaryToken)
	if _, err := os.Stat(secretIDFile); !os.IsNotExist(err) {
		t.Fatalf("the wrapped secret id file is still there: %v", err)
	}

	// Bound to networks: a secret id logs in only from them.
	run("--bind-cidrs", "192.0.2.0/24")
	if _, err := NewVault(context.Background(), VaultConfig{Auth: VaultAuthAppRole, RoleID: roleID, SecretIDFile: secretIDFile}); err == nil {
		t.Fatal("a secret id bound to 192.0.2.0/24 logged in from loopback")
	}
	run("--bind-cidrs", "127.0.0.0/8,::1/128")
	sec, err = e.root.Logical().Read("auth/approle/role/coily")
	if err != nil || fmt.Sprint(sec.Data["secret_id_bound_cidrs"]) != "[127.0.0.0/8 ::1/128]" || !strings.Contains(fmt.Sprint(sec.Data["token_bound_cidrs"]), "127.0.0.0/8") {
		t.Fatalf("bound cidrs: %v %v", sec, err)
	}
	b2 := e.vault(VaultConfig{Auth: VaultAuthAppRole, RoleID: roleID, SecretIDFile: secretIDFile})
	e.want(b2, "vault:secret/coily/github#token", canaryToken)

	// Bad arguments are refused before Vault is asked.
	for _, args := range [][]string{{"--wrap-ttl", "0"}, {"--wrap-ttl", "5x"}, {"--secret-id-ttl", "forever"},
		{"--bind-cidrs", `10.0.0.0/8"],"policies":["root`}, {"--bind-cidrs", "10.0.0.0/8,"}} {
		cmd := exec.Command(script, append([]string{"--secret-id-file", secretIDFile}, args...)...)
		cmd.Env = append(os.Environ(), "VAULT_ADDR="+e.srv.Addr, "VAULT_TOKEN="+e.srv.RootToken, "VAULT_NAMESPACE=")
		if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "bad --") {
			t.Errorf("vault-approle.sh %v: %v %s", args, err, out)
		}
	}
}
