package vaulttest

import (
	"context"
	"testing"
	"time"
)

func TestStart(t *testing.T) {
	start := time.Now()
	s := Start(t)
	t.Logf("ready in %s at %s", time.Since(start).Round(time.Millisecond), s.Addr)
	c := s.Client(t, s.RootToken)
	ctx := context.Background()
	if _, err := c.KVv2("secret").Put(ctx, "coily/x", map[string]any{"k": "v"}); err != nil {
		t.Fatalf("KV v2 write at secret/: %v", err)
	}
	sec, err := c.KVv2("secret").Get(ctx, "coily/x")
	if err != nil || sec.Data["k"] != "v" {
		t.Fatalf("KV v2 read: %v, %v", sec, err)
	}
	if _, err := s.Client(t, "").Auth().Token().LookupSelf(); err == nil {
		t.Error("a client without a token looked itself up")
	}
}

func TestStartFallbacks(t *testing.T) {
	t.Setenv("COILY_VAULTDEV", "")
	t.Chdir(t.TempDir()) // no coily module above: no bin/vaultdev
	if b := Binary(); b != "" {
		t.Fatalf("Binary() = %q outside the module", b)
	}

	t.Setenv("VAULT_ADDR", "http://127.0.0.1:8200")
	t.Setenv("VAULT_TOKEN", "root")
	if s := Start(t); s.Addr != "http://127.0.0.1:8200" || s.RootToken != "root" {
		t.Fatalf("Start with VAULT_ADDR and VAULT_TOKEN = %+v", s)
	}

	t.Setenv("VAULT_TOKEN", "")
	if s := fromEnv(); s != nil {
		t.Errorf("fromEnv() = %+v with VAULT_TOKEN unset", s)
	}

	t.Setenv("COILY_VAULTDEV", "/nonexistent/vaultdev")
	if b := Binary(); b != "/nonexistent/vaultdev" {
		t.Errorf("Binary() = %q, want $COILY_VAULTDEV", b)
	}
}
