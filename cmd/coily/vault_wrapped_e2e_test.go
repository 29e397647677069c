package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"coily.dev/coily/internal/vaulttest"
)

// coily serve with --vault-wrapped-secret-id-file, as deploy/vault-
// approle.sh --wrap-ttl sets it up: it unwraps the secret id once at
// start, removes the file, and fetches with the AppRole token; neither
// the wrapping token nor the secret id reaches its log. Started again on
// the spent file, it refuses to start and says why.
func TestServeVaultWrappedSecretID(t *testing.T) {
	_, err := exec.LookPath("curl")
	requireComponent(t, err == nil, "curl (deploy/vault-approle.sh)")
	vault := vaulttest.Start(t)
	root := vault.Client(t, vault.RootToken)
	secret := randomToken(t)
	if _, err := root.KVv2("secret").Put(t.Context(), "coily/github", map[string]any{"token": secret}); err != nil {
		t.Fatal(err)
	}
	dir := shortDir(t)
	wrapped := filepath.Join(dir, "vault-secret-id.wrapped")
	cmd := exec.Command("../../deploy/vault-approle.sh", "--wrap-ttl", "5m", "--secret-id-file", wrapped)
	cmd.Env = append(os.Environ(), "VAULT_ADDR="+vault.Addr, "VAULT_TOKEN="+vault.RootToken, "VAULT_NAMESPACE=")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("vault-approle.sh: %v\n%s", err, stderr.String())
	}
	roleID := strings.TrimSpace(stdout.String())
	b, err := os.ReadFile(wrapped)
	if err != nil {
		t.Fatal(err)
	}
	wrappingToken := strings.TrimSpace(string(b))
	spent := append([]byte(nil), b...)

	pol := writePolicy(t, dir, `version: 1
roles: {operator: {permissions: [exec, status], commands: [env]}}
commands:
  - {name: env, binary: /usr/bin/env, sandbox: native, credentials: {GH_TOKEN: "vault:secret/coily/github#token"}}
`)
	t.Setenv("VAULT_ADDR", vault.Addr)
	t.Setenv("VAULT_TOKEN", "")
	t.Setenv("VAULT_NAMESPACE", "")
	args := []string{"--vault-auth", "approle", "--vault-role-id", roleID, "--vault-wrapped-secret-id-file", wrapped}
	p := startServe(t, dir, pol, args...)
	if _, err := os.Stat(wrapped); !os.IsNotExist(err) {
		t.Fatalf("the wrapped secret id file is still there: %v", err)
	}
	r := p.run(t, "exec", "--", "/usr/bin/env")
	if r.code != 0 || !strings.Contains(r.stdout, "GH_TOKEN=[REDACTED:GH_TOKEN]\n") || strings.Contains(r.stdout+r.stderr, secret) {
		t.Fatalf("exec: %+v", r)
	}
	p.stop()
	for _, s := range []string{secret, wrappingToken} {
		if strings.Contains(p.log.String()+readAudit(t, dir), s) {
			t.Fatal("a secret or the wrapping token is in the server's log or the audit log")
		}
	}

	// The spent wrapping token again: the server refuses to start.
	if err := os.WriteFile(wrapped, spent, 0o600); err != nil {
		t.Fatal(err)
	}
	serve := exec.Command(coilyBin, append([]string{"serve", "--state-dir", dir, "--policy", pol}, args...)...)
	out, err := serve.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "already unwrapped") || strings.Contains(string(out), wrappingToken) {
		t.Fatalf("serve with a spent wrapping token: %v\n%s", err, out)
	}
}
