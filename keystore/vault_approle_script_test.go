package keystore

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestApproleScript runs deploy/vault-approle.sh against a Vault dev
// server, then logs in with the role id it prints and the secret id file
// it writes, and reads a secret under secret/coily/ (and only there).
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

	run := func() string {
		t.Helper()
		cmd := exec.Command(script, "--secret-id-file", secretIDFile, "--secret-id-ttl", "720h")
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
	roleID := run()
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
	if ttl := sec.Data["token_ttl"]; ttl == nil || ttl.(interface{ String() string }).String() != "3600" {
		t.Errorf("token_ttl = %v, want 3600", sec.Data["token_ttl"])
	}

	v := e.vault(VaultConfig{Auth: VaultAuthAppRole, RoleID: roleID, SecretIDFile: secretIDFile})
	e.want(v, "vault:secret/coily/github#token", canaryToken)
	e.expect(v, "vault:secret/other/secret#token", ErrDenied)
}
