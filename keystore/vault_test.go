package keystore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/vault/api"

	"coily.dev/coily/internal/canary"
	"coily.dev/coily/internal/poll"
	"coily.dev/coily/internal/testlog"
	"coily.dev/coily/internal/vaulttest"
)

var (
	_ Backend     = (*Vault)(nil)
	_ LockoutHook = (*Vault)(nil)
	_ io.Closer   = (*Vault)(nil)
)

// Canary values: no error or log line may contain one.
const (
	canaryToken = "ghp-CANARY-token-value-0123456789"
	canaryOther = "CANARY-other-field-value-9876543210"
	canaryV1    = "CANARY-kv1-password-5555"
)

// vaultEnv is one test's Vault: the server, a root client, and everything
// that must not leak (secret values and tokens).
type vaultEnv struct {
	t       *testing.T
	srv     *vaulttest.Server
	root    *api.Client
	logs    *testlog.Buffer
	secrets []string
}

func newVaultEnv(t *testing.T) *vaultEnv {
	t.Helper()
	return newVaultEnvWith(t, vaulttest.Start)
}

// newVaultEnvWith is newVaultEnv over the server start returns.
func newVaultEnvWith(t *testing.T, start func(testing.TB) *vaulttest.Server) *vaultEnv {
	t.Helper()
	began := time.Now()
	srv := start(t)
	t.Logf("vault dev server ready in %s at %s", time.Since(began).Round(time.Millisecond), srv.Addr)
	e := &vaultEnv{t: t, srv: srv, root: srv.Client(t, srv.RootToken), logs: &testlog.Buffer{}}
	e.secrets = append(e.secrets, canaryToken, canaryOther, canaryV1, srv.RootToken)
	// Only what a test sets: nothing of the caller's Vault environment.
	for _, k := range []string{"VAULT_ADDR", "VAULT_TOKEN", "VAULT_NAMESPACE", "VAULT_CACERT", "VAULT_CAPATH",
		"VAULT_CLIENT_CERT", "VAULT_CLIENT_KEY", "VAULT_CLIENT_TIMEOUT", "VAULT_MAX_RETRIES", "VAULT_AGENT_ADDR", "VAULT_HEADERS"} {
		t.Setenv(k, "")
	}
	t.Setenv("VAULT_ADDR", srv.Addr)
	t.Cleanup(func() { e.checkNoLeak(e.logs.String(), "logs") })
	return e
}

// write writes data as the KV v2 secret secret/<path>.
func (e *vaultEnv) write(path string, data map[string]any) {
	e.t.Helper()
	if _, err := e.root.KVv2("secret").Put(context.Background(), path, data); err != nil {
		e.t.Fatalf("writing secret/%s: %v", path, err)
	}
}

// policy installs deploy/vault-policy.hcl as policy "coily".
func (e *vaultEnv) policy() {
	e.t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "deploy", "vault-policy.hcl"))
	if err != nil {
		e.t.Fatal(err)
	}
	if err := e.root.Sys().PutPolicy("coily", string(b)); err != nil {
		e.t.Fatalf("policy: %v", err)
	}
}

// token creates a token with policy coily (deploy/vault-policy.hcl) and
// req's other settings; with NoDefaultPolicy, that policy alone must let
// coily look the token up, renew and revoke it.
func (e *vaultEnv) token(req *api.TokenCreateRequest) string {
	e.t.Helper()
	e.policy()
	if req.Policies == nil {
		req.Policies = []string{"coily"}
	}
	sec, err := e.root.Auth().Token().Create(req)
	if err != nil {
		e.t.Fatalf("token create: %v", err)
	}
	e.secrets = append(e.secrets, sec.Auth.ClientToken)
	return sec.Auth.ClientToken
}

// approle enables AppRole with role "coily" (policy coily, ttl/maxTTL) and
// returns the role id and a secret id file.
func (e *vaultEnv) approle(ttl, maxTTL string) (roleID, secretIDFile string) {
	e.t.Helper()
	e.policy()
	if err := e.root.Sys().EnableAuthWithOptions("approle", &api.EnableAuthOptions{Type: "approle"}); err != nil {
		e.t.Fatalf("enable approle: %v", err)
	}
	if _, err := e.root.Logical().Write("auth/approle/role/coily", map[string]any{
		"token_policies": []string{"coily"}, "token_ttl": ttl, "token_max_ttl": maxTTL,
	}); err != nil {
		e.t.Fatalf("role: %v", err)
	}
	sec, err := e.root.Logical().Read("auth/approle/role/coily/role-id")
	if err != nil {
		e.t.Fatalf("role id: %v", err)
	}
	roleID = sec.Data["role_id"].(string)
	sec, err = e.root.Logical().Write("auth/approle/role/coily/secret-id", nil)
	if err != nil {
		e.t.Fatalf("secret id: %v", err)
	}
	secretID := sec.Data["secret_id"].(string)
	e.secrets = append(e.secrets, secretID)
	secretIDFile = filepath.Join(e.t.TempDir(), "secret-id")
	if err := os.WriteFile(secretIDFile, []byte(secretID+"\n"), 0o600); err != nil {
		e.t.Fatal(err)
	}
	return roleID, secretIDFile
}

// vault returns a Vault backend (closed at cleanup) logging to e.logs.
func (e *vaultEnv) vault(cfg VaultConfig) *Vault {
	e.t.Helper()
	cfg.Logger = slog.New(slog.NewTextHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	v, err := NewVault(context.Background(), cfg)
	if err != nil {
		e.checkNoLeak(err.Error(), "NewVault error")
		e.t.Fatalf("NewVault: %v", err)
	}
	e.t.Cleanup(func() {
		if err := v.Close(); err != nil {
			e.t.Errorf("Close: %v", err)
		}
	})
	return v
}

// fetch fetches ref (as written in a policy) and checks that an error is
// an *Error for ref that leaks nothing.
func (e *vaultEnv) fetch(v *Vault, ref string) (string, error) {
	e.t.Helper()
	r := mustRef(e.t, ref)
	val, err := v.Fetch(context.Background(), r)
	if err != nil {
		e.checkErr(err, r)
	}
	return val, err
}

func (e *vaultEnv) checkErr(err error, r Ref) {
	e.t.Helper()
	var ke *Error
	if !errors.As(err, &ke) || ke.Ref != r {
		e.t.Errorf("error %q is not an *Error for %s", err, r)
	}
	n := 0
	for _, s := range []error{ErrNotFound, ErrDenied, ErrUnreachable, ErrRenewal} {
		if errors.Is(err, s) {
			n++
		}
	}
	if n != 1 {
		e.t.Errorf("error %q wraps %d of ErrNotFound, ErrDenied, ErrUnreachable, ErrRenewal, want 1", err, n)
	}
	if !strings.Contains(err.Error(), r.String()) {
		e.t.Errorf("error %q does not name %s", err, r)
	}
	if strings.Contains(err.Error(), "\n") {
		e.t.Errorf("error %q spans lines", err)
	}
	e.checkNoLeak(err.Error(), "error")
}

// checkNoLeak fails the test when s holds any of the test's secrets, in
// any form internal/canary looks for; what says what s is.
func (e *vaultEnv) checkNoLeak(s, what string) {
	e.t.Helper()
	c := canary.New(e.t)
	for i, secret := range e.secrets {
		if secret != "" {
			c.AddString(fmt.Sprintf("secret %d", i+1), secret)
		}
	}
	c.CheckText(what, s)
}

// expect fetches ref and wants err to wrap want.
func (e *vaultEnv) expect(v *Vault, ref string, want error, mentions ...string) error {
	e.t.Helper()
	val, err := e.fetch(v, ref)
	if !errors.Is(err, want) {
		e.t.Fatalf("Fetch(%s) = %q, %v; want an error wrapping %q", ref, val, err, want)
	}
	for _, m := range mentions {
		if !strings.Contains(err.Error(), m) {
			e.t.Errorf("error %q does not mention %q", err, m)
		}
	}
	return err
}

func (e *vaultEnv) want(v *Vault, ref, want string) {
	e.t.Helper()
	got, err := e.fetch(v, ref)
	if err != nil || got != want {
		e.t.Fatalf("Fetch(%s) = %q, %v; want the written value", ref, got, err)
	}
}

func mustRef(t testing.TB, s string) Ref {
	t.Helper()
	r, err := ParseRef(s)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestVaultKVv2TokenAuth(t *testing.T) {
	e := newVaultEnv(t)
	e.write("coily/github", map[string]any{"token": canaryToken, "other": canaryOther, "count": 3})
	e.write("other/secret", map[string]any{"token": canaryOther})
	t.Setenv("VAULT_TOKEN", e.token(&api.TokenCreateRequest{NoDefaultPolicy: true}))
	v := e.vault(VaultConfig{Auth: VaultAuthToken})

	e.want(v, "vault:secret/coily/github#token", canaryToken)
	e.want(v, "vault:secret/coily/github#other", canaryOther)

	// Latency of a fetch (the mount is cached after the first).
	const n = 50
	start := time.Now()
	for range n {
		e.want(v, "vault:secret/coily/github#token", canaryToken)
	}
	t.Logf("fetch latency: %s per fetch (%d fetches)", time.Since(start)/n, n)

	e.expect(v, "vault:secret/coily/github#missing", ErrNotFound, `field "missing"`)
	e.expect(v, "vault:secret/coily/github#count", ErrNotFound, `field "count"`, "not a string")
	e.expect(v, "vault:secret/coily/nothing-here#token", ErrNotFound)
	e.expect(v, "vault:secret/other/secret#token", ErrDenied, "secret/data/other/secret")
	e.expect(v, "vault:secret#token", ErrNotFound, "mount")

	// A deleted current version is not found either.
	e.write("coily/deleted", map[string]any{"token": canaryOther})
	if err := e.root.KVv2("secret").Delete(context.Background(), "coily/deleted"); err != nil {
		t.Fatal(err)
	}
	e.expect(v, "vault:secret/coily/deleted#token", ErrNotFound, "deleted")

	// The token still works after all that.
	e.want(v, "vault:secret/coily/github#token", canaryToken)
}

func TestVaultTokenFile(t *testing.T) {
	e := newVaultEnv(t)
	e.write("coily/github", map[string]any{"token": canaryToken})
	f := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(f, []byte(e.token(&api.TokenCreateRequest{})+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("VAULT_TOKEN", "not-a-token") // the file wins
	v := e.vault(VaultConfig{Auth: VaultAuthToken, TokenFile: f})
	e.want(v, "vault:secret/coily/github#token", canaryToken)
}

func TestVaultBadToken(t *testing.T) {
	e := newVaultEnv(t)
	bad := "hvs.CANARYnotarealtoken0123456789"
	e.secrets = append(e.secrets, bad)
	t.Setenv("VAULT_TOKEN", bad)
	_, err := NewVault(context.Background(), VaultConfig{Auth: VaultAuthToken})
	if !errors.Is(err, ErrDenied) || !strings.Contains(err.Error(), "VAULT_TOKEN") {
		t.Fatalf("NewVault with a bad token: %v; want ErrDenied mentioning VAULT_TOKEN", err)
	}
	e.checkNoLeak(err.Error(), "NewVault error")

	t.Setenv("VAULT_TOKEN", "")
	if _, err := NewVault(context.Background(), VaultConfig{}); err == nil || !strings.Contains(err.Error(), "VAULT_TOKEN") {
		t.Fatalf("NewVault without a token: %v", err)
	}
}

func TestVaultKVv1(t *testing.T) {
	e := newVaultEnv(t)
	if err := e.root.Sys().Mount("kv1", &api.MountInput{Type: "kv", Options: map[string]string{"version": "1"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.root.Logical().Write("kv1/coily/db", map[string]any{"password": canaryV1}); err != nil {
		t.Fatal(err)
	}
	t.Setenv("VAULT_TOKEN", e.srv.RootToken)
	v := e.vault(VaultConfig{})
	e.want(v, "vault:kv1/coily/db#password", canaryV1)
	e.expect(v, "vault:kv1/coily/db#user", ErrNotFound, `field "user"`)
	e.expect(v, "vault:kv1/coily/none#password", ErrNotFound)
	// Both versions side by side, each mount's version cached.
	e.write("coily/github", map[string]any{"token": canaryToken})
	e.want(v, "vault:secret/coily/github#token", canaryToken)
	e.want(v, "vault:kv1/coily/db#password", canaryV1)
}

func TestVaultPreflightRefused(t *testing.T) {
	// A token that may read the secret but whose preflight is refused
	// (no capability on the mount the preflight sees, e.g. an old Vault's
	// policy layout): the fallback, first segment as a KV v2 mount.
	e := newVaultEnv(t)
	e.write("coily/github", map[string]any{"token": canaryToken})
	v := &Vault{cfg: VaultConfig{Auth: VaultAuthToken}, log: slog.New(slog.DiscardHandler), base: e.root, mounts: map[string]mountInfo{}, loginMu: make(chan struct{}, 1)}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/v1/sys/internal/ui/mounts/") {
			w.WriteHeader(http.StatusForbidden)
			_, _ = io.WriteString(w, `{"errors":["preflight capability check returned 403"]}`)
			return
		}
		proxyTo(t, e.srv.Addr, w, r)
	}))
	defer srv.Close()
	c := e.srv.Client(t, e.srv.RootToken)
	if err := c.SetAddress(srv.URL); err != nil {
		t.Fatal(err)
	}
	v.base = c
	v.sess = &vaultSession{client: c, token: e.srv.RootToken, auth: &api.SecretAuth{}}
	defer v.Close()
	e.want(v, "vault:secret/coily/github#token", canaryToken)
	if len(v.mounts) != 0 {
		t.Errorf("a refused preflight was cached: %v", v.mounts)
	}
}

// proxyTo forwards r to addr.
func proxyTo(t *testing.T, addr string, w http.ResponseWriter, r *http.Request) {
	req, err := http.NewRequestWithContext(r.Context(), r.Method, addr+r.URL.RequestURI(), r.Body)
	if err != nil {
		t.Error(err)
		return
	}
	req.Header = r.Header.Clone()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		w.WriteHeader(http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	for k, vs := range resp.Header {
		w.Header()[k] = vs
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, resp.Body)
}

func TestVaultAppRole(t *testing.T) {
	e := newVaultEnv(t)
	e.write("coily/github", map[string]any{"token": canaryToken})
	e.write("other/secret", map[string]any{"token": canaryOther})
	roleID, secretIDFile := e.approle("1h", "24h")
	v := e.vault(VaultConfig{Auth: VaultAuthAppRole, RoleID: roleID, SecretIDFile: secretIDFile})
	e.want(v, "vault:secret/coily/github#token", canaryToken)
	e.expect(v, "vault:secret/other/secret#token", ErrDenied, "vault:secret/other/secret#token")
	if !strings.Contains(e.logs.String(), "vault approle login") {
		t.Errorf("no login logged: %s", e.logs.String())
	}

	// A wrong secret id fails NewVault, without echoing it.
	bad := filepath.Join(t.TempDir(), "bad")
	badID := "00000000-CANARY-0000-0000-000000000000"
	e.secrets = append(e.secrets, badID)
	if err := os.WriteFile(bad, []byte(badID), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := NewVault(context.Background(), VaultConfig{Auth: VaultAuthAppRole, RoleID: roleID, SecretIDFile: bad})
	if !errors.Is(err, ErrRenewal) || !strings.Contains(err.Error(), "approle login") {
		t.Fatalf("NewVault with a wrong secret id: %v; want ErrRenewal naming the approle login", err)
	}
	e.checkNoLeak(err.Error(), "NewVault error")
	// A secret id file others may read is refused before it is sent,
	// naming the file and the fix.
	if err := os.Chmod(secretIDFile, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = NewVault(context.Background(), VaultConfig{Auth: VaultAuthAppRole, RoleID: roleID, SecretIDFile: secretIDFile})
	if !errors.Is(err, ErrRenewal) || !strings.Contains(err.Error(), secretIDFile) || !strings.Contains(err.Error(), "chmod 0600") {
		t.Fatalf("NewVault with a world-readable secret id file: %v", err)
	}
}

func TestVaultConcurrent(t *testing.T) {
	e := newVaultEnv(t)
	e.write("coily/github", map[string]any{"token": canaryToken})
	e.write("coily/other", map[string]any{"token": canaryOther})
	roleID, secretIDFile := e.approle("1h", "24h")
	v := e.vault(VaultConfig{Auth: VaultAuthAppRole, RoleID: roleID, SecretIDFile: secretIDFile})
	// Drop the session: the goroutines race to log in again, once.
	v.mu.Lock()
	v.dropLocked(v.sess, "test")
	v.mu.Unlock()
	var wg sync.WaitGroup
	for i := range 32 {
		wg.Go(func() {
			ref, want := "vault:secret/coily/github#token", canaryToken
			if i%2 == 1 {
				ref, want = "vault:secret/coily/other#token", canaryOther
			}
			got, err := v.Fetch(context.Background(), mustRef(t, ref))
			if err != nil || got != want {
				t.Errorf("Fetch(%s) = %v", ref, err)
			}
		})
	}
	wg.Wait()
	if n := strings.Count(e.logs.String(), "msg=\"vault approle login\""); n != 2 {
		t.Errorf("%d logins, want 2 (NewVault, then one for all 32 fetches)", n)
	}
}

func TestVaultUnreachable(t *testing.T) {
	e := newVaultEnv(t)
	e.write("coily/github", map[string]any{"token": canaryToken})
	t.Setenv("VAULT_TOKEN", e.srv.RootToken)
	t.Setenv("VAULT_MAX_RETRIES", "0")
	t.Setenv("VAULT_CLIENT_TIMEOUT", "3s")

	// A closed port at start: NewVault says so.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + ln.Addr().String()
	ln.Close()
	t.Setenv("VAULT_ADDR", closed)
	start := time.Now()
	_, err = NewVault(context.Background(), VaultConfig{})
	if !errors.Is(err, ErrUnreachable) || !strings.Contains(err.Error(), closed) {
		t.Fatalf("NewVault against a closed port: %v; want ErrUnreachable naming %s", err, closed)
	}
	e.checkNoLeak(err.Error(), "NewVault error")
	t.Logf("unreachable at start: %s: %v", time.Since(start), err)

	// Vault going away mid-run: through a proxy that then closes.
	p := e.srv.Proxy(t)
	t.Setenv("VAULT_ADDR", p.Addr)
	v := e.vault(VaultConfig{})
	e.want(v, "vault:secret/coily/github#token", canaryToken)
	p.Cut()
	start = time.Now()
	e.expect(v, "vault:secret/coily/github#token", ErrUnreachable, p.Addr)
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("an unreachable Vault took %s to report", d)
	}

	// A Vault that does not answer in time: the caller's deadline.
	hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/auth/token/lookup-self" {
			_, _ = io.WriteString(w, `{"data":{"ttl":0,"renewable":false}}`)
			return
		}
		<-r.Context().Done()
	}))
	defer hang.Close()
	t.Setenv("VAULT_ADDR", hang.URL)
	v = e.vault(VaultConfig{})
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	r := mustRef(t, "vault:secret/coily/github#token")
	_, err = v.Fetch(ctx, r)
	if !errors.Is(err, ErrUnreachable) {
		t.Fatalf("Fetch from a hanging Vault: %v; want ErrUnreachable", err)
	}
	e.checkErr(err, r)
}

func TestVaultRenewal(t *testing.T) {
	e := newVaultEnv(t)
	e.write("coily/github", map[string]any{"token": canaryToken})
	renewable := true
	t.Setenv("VAULT_TOKEN", e.token(&api.TokenCreateRequest{TTL: "3s", ExplicitMaxTTL: "30s", Renewable: &renewable, NoDefaultPolicy: true}))
	v := e.vault(VaultConfig{})
	// Past two initial TTLs, every fetch works: the watcher renews.
	start := time.Now()
	for time.Since(start) < 7*time.Second {
		e.want(v, "vault:secret/coily/github#token", canaryToken)
		time.Sleep(200 * time.Millisecond) // pacing, not synchronization
	}
	if !strings.Contains(e.logs.String(), "vault token renewed") {
		t.Errorf("no renewal logged: %s", e.logs.String())
	}
}

func TestVaultTokenExpires(t *testing.T) {
	renewable := true
	for _, tc := range []struct {
		name string
		req  api.TokenCreateRequest
	}{
		{"max TTL", api.TokenCreateRequest{TTL: "2s", ExplicitMaxTTL: "3s", Renewable: &renewable}},
		{"not renewable", api.TokenCreateRequest{TTL: "2s", Renewable: new(bool)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newVaultEnv(t)
			e.write("coily/github", map[string]any{"token": canaryToken})
			t.Setenv("VAULT_TOKEN", e.token(&tc.req))
			v := e.vault(VaultConfig{})
			e.want(v, "vault:secret/coily/github#token", canaryToken)
			var err error
			poll.Until(t, 15*time.Second, "the expired token noticed", func() bool {
				_, err = e.fetch(v, "vault:secret/coily/github#token")
				return err != nil
			})
			if !errors.Is(err, ErrRenewal) || !strings.Contains(err.Error(), "token") {
				t.Fatalf("after expiry: %v; want ErrRenewal mentioning the token", err)
			}
			t.Logf("after expiry: %v", err)
			// For good, until restart.
			e.expect(v, "vault:secret/coily/github#token", ErrRenewal, "restart")
		})
	}
}

func TestVaultTokenRevokedBehindItsBack(t *testing.T) {
	// A token revoked by someone else: the watcher has not noticed; the
	// 403 "invalid token" on the next read has.
	e := newVaultEnv(t)
	e.write("coily/github", map[string]any{"token": canaryToken})
	tok := e.token(&api.TokenCreateRequest{})
	t.Setenv("VAULT_TOKEN", tok)
	v := e.vault(VaultConfig{})
	e.want(v, "vault:secret/coily/github#token", canaryToken)
	if err := e.root.Auth().Token().RevokeOrphan(tok); err != nil {
		t.Fatal(err)
	}
	e.expect(v, "vault:secret/coily/github#token", ErrRenewal, "no longer valid")
}

func TestVaultAppRoleLogsInAgain(t *testing.T) {
	e := newVaultEnv(t)
	e.write("coily/github", map[string]any{"token": canaryToken})
	roleID, secretIDFile := e.approle("2s", "3s")
	v := e.vault(VaultConfig{Auth: VaultAuthAppRole, RoleID: roleID, SecretIDFile: secretIDFile})
	// Past two max TTLs, every fetch works: it logs in again each time.
	logins := func() int { return strings.Count(e.logs.String(), "msg=\"vault approle login\"") }
	deadline := time.Now().Add(30 * time.Second)
	for logins() < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("%d logins in 30s with a 3s max TTL", logins())
		}
		e.want(v, "vault:secret/coily/github#token", canaryToken)
		time.Sleep(100 * time.Millisecond) // pacing, not synchronization
	}
	e.want(v, "vault:secret/coily/github#token", canaryToken)
}

func TestVaultAppRoleTokenRevoked(t *testing.T) {
	// A token revoked behind its back: it logs in again at once.
	e := newVaultEnv(t)
	e.write("coily/github", map[string]any{"token": canaryToken})
	roleID, secretIDFile := e.approle("1h", "24h")
	v := e.vault(VaultConfig{Auth: VaultAuthAppRole, RoleID: roleID, SecretIDFile: secretIDFile})
	e.want(v, "vault:secret/coily/github#token", canaryToken)
	v.mu.Lock()
	tok := v.sess.token
	v.mu.Unlock()
	if err := e.root.Auth().Token().RevokeOrphan(tok); err != nil {
		t.Fatal(err)
	}
	e.want(v, "vault:secret/coily/github#token", canaryToken)
	if n := strings.Count(e.logs.String(), "msg=\"vault approle login\""); n != 2 {
		t.Errorf("%d logins, want 2", n)
	}
}

func TestVaultRevokeOnLockout(t *testing.T) {
	t.Run("token", func(t *testing.T) {
		e := newVaultEnv(t)
		e.write("coily/github", map[string]any{"token": canaryToken})
		tok := e.token(&api.TokenCreateRequest{NoDefaultPolicy: true})
		t.Setenv("VAULT_TOKEN", tok)
		v := e.vault(VaultConfig{RevokeOnLockout: true})
		e.want(v, "vault:secret/coily/github#token", canaryToken)
		ks := New(Config{Backends: map[string]Backend{BackendVault: v}})
		if err := ks.Lockout(context.Background()); err != nil {
			t.Fatalf("Lockout: %v", err)
		}
		if _, err := e.srv.Client(t, tok).Auth().Token().LookupSelf(); err == nil {
			t.Fatal("the token still works after the lockout")
		}
		e.expect(v, "vault:secret/coily/github#token", ErrRenewal, "revoked at lockout")
		if !strings.Contains(e.logs.String(), "vault token revoked at lockout") {
			t.Errorf("the revocation is not logged: %s", e.logs.String())
		}
	})
	t.Run("approle", func(t *testing.T) {
		e := newVaultEnv(t)
		e.write("coily/github", map[string]any{"token": canaryToken})
		roleID, secretIDFile := e.approle("1h", "24h")
		v := e.vault(VaultConfig{Auth: VaultAuthAppRole, RoleID: roleID, SecretIDFile: secretIDFile, RevokeOnLockout: true})
		v.mu.Lock()
		tok := v.sess.token
		v.mu.Unlock()
		if err := v.Lockout(context.Background()); err != nil {
			t.Fatalf("Lockout: %v", err)
		}
		if _, err := e.srv.Client(t, tok).Auth().Token().LookupSelf(); err == nil {
			t.Fatal("the token still works after the lockout")
		}
		e.want(v, "vault:secret/coily/github#token", canaryToken) // a new login
	})
	t.Run("off", func(t *testing.T) {
		e := newVaultEnv(t)
		e.write("coily/github", map[string]any{"token": canaryToken})
		t.Setenv("VAULT_TOKEN", e.token(&api.TokenCreateRequest{}))
		v := e.vault(VaultConfig{})
		if err := v.Lockout(context.Background()); err != nil {
			t.Fatal(err)
		}
		e.want(v, "vault:secret/coily/github#token", canaryToken)
	})
}

func TestVaultNamespace(t *testing.T) {
	// OSS Vault has no namespaces: check the header on a fake.
	var mu sync.Mutex
	var seen []string
	fake := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.URL.Path+" ns="+r.Header.Get("X-Vault-Namespace"))
		mu.Unlock()
		var body any
		switch r.URL.Path {
		case "/v1/auth/token/lookup-self":
			body = map[string]any{"data": map[string]any{"ttl": 0, "renewable": false}}
		case "/v1/sys/internal/ui/mounts/secret/coily/github":
			body = map[string]any{"data": map[string]any{"path": "secret/", "type": "kv", "options": map[string]any{"version": "2"}}}
		case "/v1/secret/data/coily/github":
			body = map[string]any{"data": map[string]any{"data": map[string]any{"token": "v"}}}
		default:
			w.WriteHeader(http.StatusNotFound)
			body = map[string]any{"errors": []string{}}
		}
		_ = json.NewEncoder(w).Encode(body)
	}))
	defer fake.Close()
	for _, tc := range []struct{ name, env, cfg, want string }{
		{"config", "", "team-a", "team-a"},
		{"environment", "team-b", "", "team-b"},
		{"config wins", "team-b", "team-a", "team-a"},
		{"none", "", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mu.Lock()
			seen = nil
			mu.Unlock()
			t.Setenv("VAULT_ADDR", fake.URL)
			t.Setenv("VAULT_TOKEN", "t")
			t.Setenv("VAULT_NAMESPACE", tc.env)
			v, err := NewVault(context.Background(), VaultConfig{Namespace: tc.cfg})
			if err != nil {
				t.Fatal(err)
			}
			defer v.Close()
			if got, err := v.Fetch(context.Background(), mustRef(t, "vault:secret/coily/github#token")); err != nil || got != "v" {
				t.Fatalf("Fetch = %q, %v", got, err)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(seen) != 3 {
				t.Fatalf("requests %v, want lookup-self, preflight, read", seen)
			}
			for _, s := range seen {
				if !strings.HasSuffix(s, " ns="+tc.want) {
					t.Errorf("request %s, want namespace %q", s, tc.want)
				}
			}
		})
	}
}

func TestVaultServerErrors(t *testing.T) {
	// Sealed (503) is unreachable; an error body never reaches a message
	// raw, nor the token.
	fake := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/auth/token/lookup-self":
			_, _ = io.WriteString(w, `{"data":{"ttl":0,"renewable":false}}`)
		case "/v1/sys/internal/ui/mounts/secret/sealed/x":
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, `{"errors":["Vault is sealed"]}`)
		default:
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = io.WriteString(w, "<html>"+canaryOther+" tok-CANARY-fake</html>")
		}
	}))
	defer fake.Close()
	t.Setenv("VAULT_ADDR", fake.URL)
	t.Setenv("VAULT_TOKEN", "tok-CANARY-fake")
	t.Setenv("VAULT_MAX_RETRIES", "0")
	t.Setenv("VAULT_NAMESPACE", "")
	v, err := NewVault(context.Background(), VaultConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	e := &vaultEnv{t: t, secrets: []string{canaryOther, "tok-CANARY-fake"}}
	e.expect(v, "vault:secret/sealed/x#f", ErrUnreachable, "503", "sealed")
	e.expect(v, "vault:secret/raw/x#f", ErrUnreachable, "500")
}
