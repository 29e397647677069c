package server_test

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"coily.dev/coily/internal/benchstat"
	"coily.dev/coily/internal/testserver"
	"coily.dev/coily/internal/vaulttest"
	"coily.dev/coily/keystore"
	coilyv1 "coily.dev/coily/proto/coily/v1"
)

const vaultCredPolicy = `version: 1
limits: {concurrency: 4}
roles: {operator: {permissions: [exec], commands: ["*"]}}
commands:
  - {name: env, binary: /usr/bin/env, sandbox: native, credentials: {GH_TOKEN: "vault:secret/coily/github#token"}}
  - {name: "true", binary: /bin/true, sandbox: native}
  - {name: true-cred, binary: /bin/true, args: [cred], sandbox: native, credentials: {GH_TOKEN: "vault:secret/coily/github#token"}}
`

// vaultServer starts a real Vault holding secret/coily/github and a coily
// server fetching from it with the given cache TTL.
func vaultServer(t testing.TB, token string, ttl time.Duration) *testserver.Instance {
	t.Helper()
	v := vaulttest.Start(t)
	root := v.Client(t, v.RootToken)
	if _, err := root.KVv2("secret").Put(context.Background(), "coily/github", map[string]any{"token": token}); err != nil {
		t.Fatal(err)
	}
	t.Setenv("VAULT_ADDR", v.Addr)
	t.Setenv("VAULT_TOKEN", v.RootToken)
	vb, err := keystore.NewVault(context.Background(), keystore.VaultConfig{Auth: "token"})
	if err != nil {
		t.Fatal(err)
	}
	ks := keystore.New(keystore.Config{Backends: map[string]keystore.Backend{keystore.BackendVault: vb}, CacheTTL: ttl})
	t.Cleanup(func() { ks.Close() })
	return testserver.Start(t, testserver.Options{Policy: vaultCredPolicy, Keystore: ks})
}

// A credential from a real Vault reaches the command and only its name
// comes back.
func TestVaultCredentialThroughServer(t *testing.T) {
	token := "ghp_" + strings.Repeat("x1", 18)
	in := vaultServer(t, token, -1)
	var out bytes.Buffer
	if _, err := in.Client.Exec(context.Background(), &coilyv1.ExecRequest{Argv: []string{"/usr/bin/env"}}, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "GH_TOKEN=[REDACTED:GH_TOKEN]\n") || strings.Contains(out.String(), token) {
		t.Fatalf("env output does not show the redacted credential (%d bytes)", out.Len())
	}
}

// BenchmarkExecCredential measures an Exec of /bin/true that injects one
// credential from a real Vault, with the cache warm (hit) and disabled
// (miss: a KV read per Exec), against the same Exec without a credential,
// interleaved in the same run.
// Run: go test -run '^$' -bench ExecCredential -benchtime 1000x ./server/
func BenchmarkExecCredential(b *testing.B) {
	token := "ghp_" + strings.Repeat("y2", 18)
	hit := vaultServer(b, token, time.Hour)
	miss := vaultServer(b, token, -1)
	ctx := context.Background()
	plain := &coilyv1.ExecRequest{Argv: []string{"/bin/true"}}
	cred := &coilyv1.ExecRequest{Argv: []string{"/bin/true", "cred"}}
	run := func(in *testserver.Instance, req *coilyv1.ExecRequest) time.Duration {
		t0 := time.Now()
		if _, err := in.Client.Exec(ctx, req, io.Discard, io.Discard); err != nil {
			b.Fatal(err)
		}
		return time.Since(t0)
	}
	run(hit, plain)
	run(hit, cred)
	run(miss, cred)
	var none, hits, misses []time.Duration
	b.ResetTimer()
	for range b.N {
		none = append(none, run(hit, plain))
		hits = append(hits, run(hit, cred))
		misses = append(misses, run(miss, cred))
	}
	b.StopTimer()
	benchstat.Report(b, "none", none)
	benchstat.Report(b, "hit", hits)
	benchstat.Report(b, "miss", misses)
	b.ReportMetric(benchstat.Ratio(hits, none, 50), "hit/none-p50")
	b.ReportMetric(benchstat.Ratio(misses, none, 50), "miss/none-p50")
}
