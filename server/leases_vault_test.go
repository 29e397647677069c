package server_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/vault/api"

	"coily.dev/coily/attach/leases"
	"coily.dev/coily/audit"
	"coily.dev/coily/internal/benchstat"
	"coily.dev/coily/internal/canary"
	"coily.dev/coily/internal/standin"
	"coily.dev/coily/internal/testlog"
	"coily.dev/coily/internal/testserver"
	"coily.dev/coily/internal/vaulttest"
	"coily.dev/coily/keystore"
	coilyv1 "coily.dev/coily/proto/coily/v1"
	"coily.dev/coily/store"
)

const awsLeasePolicy = `version: 1
limits: {concurrency: 4}
roles: {operator: {permissions: [exec], commands: ["*"]}}
commands:
  - name: aws-env
    binary: /bin/sh
    args: ["**"]
    flags: any
    sandbox: native
    timeout: 1m
    credentials:
      AWS_ACCESS_KEY_ID: "vault:aws/sts/coily-s3#access_key"
      AWS_SECRET_ACCESS_KEY: "vault:aws/sts/coily-s3#secret_key"
      AWS_SESSION_TOKEN: "vault:aws/sts/coily-s3#session_token"
  - name: leased
    binary: /bin/sleep
    args: ["*"]
    sandbox: native
    timeout: 1m
    credentials: {DB_PASSWORD: "vault:leased/coily/db#password"}
`

// leaseVault is a Vault with the AWS engine (role coily-s3, over an STS
// stand-in) and leased-kv at leased/, and a keystore on it.
type leaseVault struct {
	srv  *vaulttest.Server
	root *api.Client
	keys *standin.AWSKeys
}

func startLeaseVault(t testing.TB) *leaseVault {
	t.Helper()
	keys := standin.NewAWSKeys()
	keys.Add("AKIDLEASEROOT", "lease-root-secret")
	sts := standin.STS(t, keys)
	srv := vaulttest.StartAWS(t, sts.CAFile)
	srv.AWS(t, sts.URL, "AKIDLEASEROOT", "lease-root-secret")
	root := srv.Client(t, srv.RootToken)
	if _, err := root.Logical().Write("aws/roles/coily-s3", map[string]any{"credential_type": "assumed_role",
		"role_arns": "arn:aws:iam::123456789012:role/coily-s3", "default_sts_ttl": "15m"}); err != nil {
		t.Fatal(err)
	}
	if err := root.Sys().Mount("leased", &api.MountInput{Type: "leased-kv"}); err != nil {
		t.Fatal(err)
	}
	return &leaseVault{srv: srv, root: root, keys: keys}
}

// keystore returns a keystore with a vault backend on addr (the server's,
// or a proxy's), root token, fetches bounded by timeout.
func (lv *leaseVault) keystore(t *testing.T, addr string, timeout time.Duration) *keystore.Keystore {
	t.Helper()
	t.Setenv("VAULT_ADDR", addr)
	t.Setenv("VAULT_TOKEN", lv.srv.RootToken)
	t.Setenv("VAULT_MAX_RETRIES", "0")
	vb, err := keystore.NewVault(context.Background(), keystore.VaultConfig{})
	if err != nil {
		t.Fatal(err)
	}
	ks := keystore.New(keystore.Config{Backends: map[string]keystore.Backend{keystore.BackendVault: vb}, CacheTTL: time.Hour, Timeout: timeout})
	t.Cleanup(func() { ks.Close() })
	return ks
}

// leasesOf polls the store until it holds n leases.
func leasesOf(t *testing.T, db *store.DB, n int) []store.Lease {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ls, err := db.Leases()
		if err != nil {
			t.Fatal(err)
		}
		if len(ls) == n {
			return ls
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d leases in the store, want %d", len(ls), n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// One exec's AWS key, secret and session token come from one lease: it is
// in the store while the command runs (recorded before the command
// started), its id (never a value) is in the exec's audit records, and it
// is revoked in Vault and gone from the store once the command ends. The
// keystore's hour-long cache does not make the next exec share it.
func TestExecLeaseRevokedAfterCommand(t *testing.T) {
	lv := startLeaseVault(t)
	var logs testlog.Buffer
	in := testserver.Start(t, testserver.Options{Policy: awsLeasePolicy, Keystore: lv.keystore(t, lv.srv.Addr, 0), Log: &logs})

	type result struct {
		exit *coilyv1.ExecExit
		out  string
		err  error
	}
	run := func(script string) <-chan result {
		ch := make(chan result, 1)
		go func() {
			var out bytes.Buffer
			exit, err := in.Client.Exec(context.Background(), &coilyv1.ExecRequest{Argv: []string{"/bin/sh", "-c", script}}, &out, io.Discard)
			ch <- result{exit, out.String(), err}
		}()
		return ch
	}
	// The command holds its keys until the test has looked at the store.
	script := `echo "$AWS_ACCESS_KEY_ID $AWS_SECRET_ACCESS_KEY $AWS_SESSION_TOKEN"; sleep 2`
	done := run(script)
	held := leasesOf(t, in.Store(), 1)[0]
	if !strings.HasPrefix(held.ID, "aws/sts/coily-s3/") || held.Rule != "aws-env" || held.Backend != "vault" ||
		held.Expires.Sub(held.Acquired) > 15*time.Minute || !lv.srv.LeaseAlive(t, held.ID) {
		t.Fatalf("lease held %+v", held)
	}
	r := <-done
	if r.err != nil || r.exit.GetExitCode() != 0 {
		t.Fatalf("exec: %v", r.err)
	}
	if want := "[REDACTED:AWS_ACCESS_KEY_ID] [REDACTED:AWS_SECRET_ACCESS_KEY] [REDACTED:AWS_SESSION_TOKEN]\n"; r.out != want {
		t.Fatalf("output %q, want %q", r.out, want)
	}
	if lv.srv.LeaseAlive(t, held.ID) {
		t.Fatal("the lease is alive in Vault after the command ended")
	}
	leasesOf(t, in.Store(), 0)

	res, err := audit.Find(in.Audit.Dir(), r.exit.GetAuditId())
	if err != nil {
		t.Fatal(err)
	}
	recs, err := audit.FindRequest(in.Audit.Dir(), res.RequestID)
	if err != nil || len(recs) != 2 {
		t.Fatalf("records of the request: %d, %v", len(recs), err)
	}
	for _, rec := range recs {
		if len(rec.Leases) != 1 || rec.Leases[0] != held.ID {
			t.Errorf("%s record carries leases %q, want [%s]", rec.Event, rec.Leases, held.ID)
		}
	}
	if res.Details["leases_revoked"] != "1" || len(res.Lists["lease_revoke_failed"]) != 0 {
		t.Errorf("result details %v", res.Details)
	}

	// A second exec: its own keys and lease.
	r = <-run(`true`)
	if r.err != nil {
		t.Fatal(r.err)
	}
	issued := lv.keys.Issued()
	if len(issued) != 2 || issued[0].AccessKey == issued[1].AccessKey {
		t.Fatalf("issued %+v, want one key per exec", issued)
	}
	// Secrets nowhere: the audit log's files, the server's log, the
	// output, the state file (which held the lease ids).
	db, err := os.ReadFile(in.Store().Path())
	if err != nil {
		t.Fatal(err)
	}
	checkNoSecrets(t, in.Audit.Dir(), logs.String()+r.out+string(db), lv.keys.Secrets())
}

// checkNoSecrets fails if any of secrets, in any form internal/canary
// looks for, is in a file of the audit log or in text.
func checkNoSecrets(t *testing.T, auditDir, text string, secrets []string) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(auditDir, "*.jsonl"))
	if err != nil || len(files) == 0 {
		t.Fatalf("audit files: %v", err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		text += string(b)
	}
	c := canary.New(t)
	for i, s := range secrets {
		c.AddString(fmt.Sprintf("credential %d", i+1), s)
	}
	c.CheckText("the audit log, the server's log or the output", text)
}

// A lease whose TTL is shorter than the command's timeout is renewed while
// the command runs (it outlives its first TTL), and revoked after.
func TestExecLeaseRenewedWhileRunning(t *testing.T) {
	lv := startLeaseVault(t)
	if _, err := lv.root.Logical().Write("leased/coily/db", map[string]any{"password": "CANARY-leased-db-7777", "ttl": "2s"}); err != nil {
		t.Fatal(err)
	}
	in := testserver.Start(t, testserver.Options{Policy: awsLeasePolicy, Keystore: lv.keystore(t, lv.srv.Addr, 0)})
	done := make(chan error, 1)
	var exit *coilyv1.ExecExit
	go func() {
		var err error
		exit, err = in.Client.Exec(context.Background(), &coilyv1.ExecRequest{Argv: []string{"/bin/sleep", "5"}}, io.Discard, io.Discard)
		done <- err
	}()
	held := leasesOf(t, in.Store(), 1)[0]
	firstExpiry := held.Acquired.Add(2 * time.Second)
	// Past its first TTL (and more), it is still alive.
	for time.Now().Before(firstExpiry.Add(1500 * time.Millisecond)) {
		if !lv.srv.LeaseAlive(t, held.ID) {
			t.Fatalf("the lease expired %s after it was acquired, while the command ran", time.Since(held.Acquired))
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if lv.srv.LeaseAlive(t, held.ID) {
		t.Fatal("the lease is alive after the command")
	}
	res, err := audit.Find(in.Audit.Dir(), exit.GetAuditId())
	if err != nil || res.Details["lease_renewals"] == "" || res.Details["lease_renewals"] == "0" || res.Details["leases_revoked"] != "1" {
		t.Fatalf("result %v, %v; want renewals and a revocation", res.Details, err)
	}
}

// A lease that cannot be revoked when its command ends (Vault unreachable)
// stays in the store, the exec ends within the fetch timeout and says so
// in its record; the next start revokes it and audits that.
func TestLeaseLeftoverRevokedAtNextStart(t *testing.T) {
	lv := startLeaseVault(t)
	proxy := lv.srv.Proxy(t)
	in := testserver.Start(t, testserver.Options{Policy: awsLeasePolicy, Keystore: lv.keystore(t, proxy.Addr, 2*time.Second)})
	done := make(chan error, 1)
	var exit *coilyv1.ExecExit
	go func() {
		var err error
		exit, err = in.Client.Exec(context.Background(), &coilyv1.ExecRequest{Argv: []string{"/bin/sh", "-c", "sleep 1"}}, io.Discard, io.Discard)
		done <- err
	}()
	held := leasesOf(t, in.Store(), 1)[0]
	proxy.Cut() // Vault unreachable from now on
	start := time.Now()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("the exec took %s to end with Vault unreachable", took)
	}
	res, err := audit.Find(in.Audit.Dir(), exit.GetAuditId())
	if err != nil || res.Details["leases_revoked"] != "0" || !strings.Contains(strings.Join(res.Lists["lease_revoke_failed"], "\n"), held.ID) {
		t.Fatalf("result %v, %v; want the failed revocation named", res.Details, err)
	}
	if !lv.srv.LeaseAlive(t, held.ID) {
		t.Fatal("the lease is gone though Vault could not be reached")
	}
	if ls := leasesOf(t, in.Store(), 1); ls[0].ID != held.ID {
		t.Fatalf("store holds %+v", ls)
	}
	auditDir := in.Audit.Dir()

	// The next start, with Vault reachable: revoked and audited.
	next := in.Restart(testserver.Options{Policy: awsLeasePolicy, Keystore: lv.keystore(t, lv.srv.Addr, 0)})
	leasesOf(t, next.Store(), 0)
	if lv.srv.LeaseAlive(t, held.ID) {
		t.Fatal("the leftover lease is alive after the next start")
	}
	var rev *audit.Record
	recs, err := audit.Tail(auditDir, 50)
	if err != nil {
		t.Fatal(err)
	}
	for i := range recs {
		if recs[i].Event == leases.EventRevoke {
			rev = &recs[i]
		}
	}
	if rev == nil || len(rev.Leases) != 1 || rev.Leases[0] != held.ID || rev.RequestID != held.RequestID ||
		rev.Details["result"] != "revoked" || rev.Rule != "aws-env" {
		t.Fatalf("lease.revoke record %+v", rev)
	}
}

// BenchmarkExecLease measures an Exec of /bin/true whose three AWS
// credentials come from one read of aws/sts/<role> (an AssumeRole at the
// STS stand-in, the lease recorded in the store, revoked after), against
// the same Exec with one KV credential read each time (no cache), in the
// same run, interleaved.
// Run: go test -run '^$' -bench ExecLease -benchtime 200x ./server/
func BenchmarkExecLease(b *testing.B) {
	lv := startLeaseVault(b)
	if _, err := lv.root.KVv2("secret").Put(context.Background(), "coily/github", map[string]any{"token": "ghp_" + strings.Repeat("z3", 18)}); err != nil {
		b.Fatal(err)
	}
	const pol = awsLeasePolicy + `  - {name: kv-true, binary: /bin/true, args: [kv], sandbox: native, credentials: {GH_TOKEN: "vault:secret/coily/github#token"}}
`
	b.Setenv("VAULT_ADDR", lv.srv.Addr)
	b.Setenv("VAULT_TOKEN", lv.srv.RootToken)
	vb, err := keystore.NewVault(context.Background(), keystore.VaultConfig{})
	if err != nil {
		b.Fatal(err)
	}
	ks := keystore.New(keystore.Config{Backends: map[string]keystore.Backend{keystore.BackendVault: vb}, CacheTTL: -1})
	b.Cleanup(func() { ks.Close() })
	in := testserver.Start(b, testserver.Options{Policy: pol, Keystore: ks})
	ctx := context.Background()
	lease := &coilyv1.ExecRequest{Argv: []string{"/bin/sh", "-c", "true"}}
	kv := &coilyv1.ExecRequest{Argv: []string{"/bin/true", "kv"}}
	run := func(req *coilyv1.ExecRequest) time.Duration {
		t0 := time.Now()
		if _, err := in.Client.Exec(ctx, req, io.Discard, io.Discard); err != nil {
			b.Fatal(err)
		}
		return time.Since(t0)
	}
	run(lease)
	run(kv)
	var leased, static []time.Duration
	b.ResetTimer()
	for range b.N {
		leased = append(leased, run(lease))
		static = append(static, run(kv))
	}
	b.StopTimer()
	benchstat.Report(b, "lease", leased)
	benchstat.Report(b, "kv", static)
	b.ReportMetric(benchstat.Ratio(leased, static, 50), "lease/kv-p50")
	if n := len(lv.keys.Issued()); n != b.N+1 {
		b.Fatalf("%d keys issued for %d execs", n, b.N+1)
	}
}
