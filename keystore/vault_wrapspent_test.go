package keystore

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A wrapped secret id spent by someone else between coily's lookup and
// its unwrap (an interceptor in front of Vault unwraps it first) fails
// the start saying it was spent and may have been intercepted; a lookup
// that fails for another reason (Vault erring, refusing) says nothing of
// the kind and leaves the token wrapped.
func TestVaultWrappedSecretIDSpent(t *testing.T) {
	e := newVaultEnv(t)
	roleID, _ := e.approle("1h", "24h")
	file := filepath.Join(t.TempDir(), "wrapped")
	var wt string
	lookup := 0 // what the stand-in answers sys/wrapping/lookup: 0 forwards it
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/v1/sys/wrapping/lookup" && lookup != 0:
			w.WriteHeader(lookup)
			_, _ = io.WriteString(w, `{"errors":["the stand-in refuses"]}`)
			return
		case r.URL.Path == "/v1/sys/wrapping/unwrap":
			// The interceptor unwraps it first.
			sec, err := e.srv.Client(t, e.srv.RootToken).Logical().Unwrap(wt)
			if err != nil || sec == nil {
				t.Errorf("the interceptor's unwrap: %v", err)
			} else if id, ok := sec.Data["secret_id"].(string); ok {
				e.secrets = append(e.secrets, id)
			}
		}
		proxyTo(t, e.srv.Addr, w, r)
	}))
	defer srv.Close()
	t.Setenv("VAULT_ADDR", srv.URL)
	cfg := VaultConfig{Auth: VaultAuthAppRole, RoleID: roleID, WrappedSecretIDFile: file}
	start := func() error {
		t.Helper()
		wt = e.wrapSecretID("auth/approle/role/coily/secret-id")
		if err := os.WriteFile(file, []byte(wt+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		v, err := NewVault(context.Background(), cfg)
		if err == nil {
			v.Close()
			t.Fatal("started")
		}
		e.checkNoLeak(err.Error(), "NewVault error")
		if _, serr := os.Stat(file); serr != nil {
			t.Errorf("the file was removed: %v", serr)
		}
		return err
	}

	err := start()
	if !errors.Is(err, ErrDenied) || !strings.Contains(err.Error(), "the wrapped secret id in "+file+" was spent between coily's lookup and its unwrap") ||
		!strings.Contains(err.Error(), "intercepted") {
		t.Fatalf("intercepted: %v", err)
	}
	for status, want := range map[int]error{http.StatusInternalServerError: ErrUnreachable, http.StatusForbidden: ErrDenied} {
		lookup = status
		err := start()
		if !errors.Is(err, want) || strings.Contains(err.Error(), "spent ") || strings.Contains(err.Error(), "intercepted") ||
			!strings.Contains(err.Error(), file) {
			t.Fatalf("lookup answered %d: %v", status, err)
		}
		if _, err := e.root.Logical().Write("sys/wrapping/lookup", map[string]any{"token": wt}); err != nil {
			t.Fatalf("lookup answered %d: the token was unwrapped: %v", status, err)
		}
	}
}
