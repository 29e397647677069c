package keystore

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/vault/api"

	"coily.dev/coily/internal/poll"
	"coily.dev/coily/internal/standin"
	"coily.dev/coily/internal/vaulttest"
)

// awsEnv is a Vault whose AWS secrets engine (aws/) gets its STS keys
// from an STS stand-in; roles coily-s3 (assumed_role) and coily-fed
// (federation_token).
type awsEnv struct {
	*vaultEnv
	keys *standin.AWSKeys
	sts  *standin.STSServer
}

const (
	awsRootKey    = "AKIDVAULTROOT"
	awsRootSecret = "CANARY-aws-root-secret-4242"
	awsRoleARN    = "arn:aws:iam::123456789012:role/coily-s3"
)

func newAWSEnv(t *testing.T) *awsEnv {
	t.Helper()
	keys := standin.NewAWSKeys()
	keys.Add(awsRootKey, awsRootSecret)
	sts := standin.STS(t, keys)
	e := &awsEnv{keys: keys, sts: sts}
	e.vaultEnv = newVaultEnvWith(t, func(t testing.TB) *vaulttest.Server { return vaulttest.StartAWS(t, sts.CAFile) })
	e.secrets = append(e.secrets, awsRootSecret)
	e.srv.AWS(t, sts.URL, awsRootKey, awsRootSecret)
	for role, data := range map[string]map[string]any{
		"coily-s3":  {"credential_type": "assumed_role", "role_arns": awsRoleARN, "default_sts_ttl": "15m", "max_sts_ttl": "1h"},
		"coily-fed": {"credential_type": "federation_token", "policy_document": `{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"s3:ListAllMyBuckets","Resource":"*"}]}`},
	} {
		if _, err := e.root.Logical().Write("aws/roles/"+role, data); err != nil {
			t.Fatalf("aws/roles/%s: %v", role, err)
		}
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("sts calls: %q", sts.Calls())
		}
	})
	return e
}

// issued returns the temporary keys STS issued, remembering their ids
// as secrets of the test (they are not, but nothing should print them
// either way).
func (e *awsEnv) issued() []standin.IssuedKey { return e.keys.Issued() }

// leaseAlive reports whether Vault still holds lease id.
func (e *vaultEnv) leaseAlive(id string) bool {
	e.t.Helper()
	_, err := e.root.Sys().Lookup(id)
	var re *api.ResponseError
	if errors.As(err, &re) && re.StatusCode == 400 {
		return false
	}
	if err != nil {
		e.t.Fatalf("lease lookup %s: %v", id, err)
	}
	return true
}

// activeLeases lists the leases Vault holds under prefix (sys/leases/lookup).
func (e *vaultEnv) activeLeases(prefix string) []string {
	e.t.Helper()
	sec, err := e.root.Logical().List("sys/leases/lookup/" + prefix)
	if err != nil {
		e.t.Fatalf("listing leases under %s: %v", prefix, err)
	}
	if sec == nil {
		return nil
	}
	var out []string
	keys, _ := sec.Data["keys"].([]any)
	for _, k := range keys {
		out = append(out, prefix+k.(string))
	}
	return out
}

var awsRefs = map[string]Ref{
	"AWS_ACCESS_KEY_ID":     {Backend: BackendVault, Path: "aws/sts/coily-s3", Field: "access_key"},
	"AWS_SECRET_ACCESS_KEY": {Backend: BackendVault, Path: "aws/sts/coily-s3", Field: "secret_key"},
	"AWS_SESSION_TOKEN":     {Backend: BackendVault, Path: "aws/sts/coily-s3", Field: "session_token"},
	"GH_TOKEN":              {Backend: BackendVault, Path: "secret/coily/github", Field: "token"},
}

// The key, secret and session token of one fetch come from one read of
// aws/sts/<role> (one AssumeRole at STS, one lease), alongside a KV
// secret; a read carrying a lease is never cached, so the next fetch has
// its own keys and lease; revoking the lease ends it in Vault. The token
// used is one of deploy/vault-policy.hcl, which allows exactly that.
func TestVaultAWSOneReadOneLease(t *testing.T) {
	e := newAWSEnv(t)
	e.write("coily/github", map[string]any{"token": canaryToken})
	t.Setenv("VAULT_TOKEN", e.token(&api.TokenCreateRequest{NoDefaultPolicy: true}))
	ks := New(Config{Backends: map[string]Backend{BackendVault: e.vault(VaultConfig{})}, CacheTTL: time.Hour})

	fetch := func() *Set {
		t.Helper()
		set, err := ks.Fetch(context.Background(), awsRefs)
		if err != nil {
			e.checkNoLeak(err.Error(), "Fetch error")
			t.Fatalf("Fetch: %v", err)
		}
		v := set.Values
		e.secrets = append(e.secrets, v["AWS_SECRET_ACCESS_KEY"], v["AWS_SESSION_TOKEN"])
		if len(set.Leases) != 1 || !strings.HasPrefix(set.Leases[0].ID, "aws/sts/coily-s3/") || set.Leases[0].Renewable ||
			set.Leases[0].TTL < 14*time.Minute || set.Leases[0].TTL > 15*time.Minute || set.Leases[0].Backend != BackendVault {
			t.Fatalf("leases %+v, want one of aws/sts/coily-s3, 15m, not renewable", set.Leases)
		}
		if !e.keys.Holds(v["AWS_ACCESS_KEY_ID"], v["AWS_SECRET_ACCESS_KEY"], v["AWS_SESSION_TOKEN"]) {
			t.Fatal("the key, secret and session token were not issued together")
		}
		if v["GH_TOKEN"] != canaryToken {
			t.Fatal("the KV secret fetched with them is wrong")
		}
		return set
	}
	first := fetch()
	issued := e.issued()
	if len(issued) != 1 || issued[0].AccessKey != first.Values["AWS_ACCESS_KEY_ID"] || issued[0].Action != "AssumeRole" ||
		!strings.HasPrefix(issued[0].Subject, awsRoleARN+" ") {
		t.Fatalf("STS issued %+v, want one AssumeRole of %s for this fetch", issued, awsRoleARN)
	}
	second := fetch()
	if n := len(e.issued()); n != 2 || second.Values["AWS_ACCESS_KEY_ID"] == first.Values["AWS_ACCESS_KEY_ID"] ||
		second.Leases[0].ID == first.Leases[0].ID {
		t.Fatalf("a second fetch reused the first's keys or lease (%d issued): a lease was cached", n)
	}

	for _, set := range []*Set{first, second} {
		id := set.Leases[0].ID
		if !e.leaseAlive(id) {
			t.Fatalf("lease %s is not in Vault", id)
		}
		if err := ks.RevokeLease(context.Background(), set.Leases[0]); err != nil {
			t.Fatalf("RevokeLease: %v", err)
		}
		if e.leaseAlive(id) {
			t.Fatalf("lease %s is still in Vault after its revocation", id)
		}
		// Revoking it again is fine.
		if err := ks.RevokeLease(context.Background(), set.Leases[0]); err != nil {
			t.Fatalf("RevokeLease of a revoked lease: %v", err)
		}
	}
	if left := e.activeLeases("aws/sts/coily-s3/"); len(left) != 0 {
		t.Fatalf("leases left in Vault: %q", left)
	}
}

// A fetch that fails after a dynamic read (a field the secret lacks, or
// another secret of the same fetch) leaves no lease behind; Vault.Fetch
// refuses a dynamic secret (it could not hand the lease on) and revokes
// it; the federation_token role works the same way.
func TestVaultAWSFailedFetchRevokes(t *testing.T) {
	e := newAWSEnv(t)
	e.write("coily/github", map[string]any{"token": canaryToken})
	t.Setenv("VAULT_TOKEN", e.token(&api.TokenCreateRequest{NoDefaultPolicy: true}))
	v := e.vault(VaultConfig{})
	ks := New(Config{Backends: map[string]Backend{BackendVault: v}})

	missingField := Ref{Backend: BackendVault, Path: "aws/sts/coily-s3", Field: "nope"}
	missingKV := Ref{Backend: BackendVault, Path: "secret/coily/none", Field: "token"}
	for _, bad := range []Ref{missingField, missingKV} {
		refs := map[string]Ref{"K": awsRefs["AWS_ACCESS_KEY_ID"], "X": bad}
		set, err := ks.Fetch(context.Background(), refs)
		var ke *Error
		if set != nil || !errors.As(err, &ke) || ke.Ref != bad || !errors.Is(err, ErrNotFound) {
			t.Fatalf("Fetch with %s: %v; want ErrNotFound naming it", bad, err)
		}
		e.checkErr(err, bad)
	}
	if n := len(e.issued()); n != 2 {
		t.Fatalf("%d keys issued, want 2 (one per fetch)", n)
	}
	if left := e.activeLeases("aws/sts/coily-s3/"); len(left) != 0 {
		t.Fatalf("a failed fetch left leases in Vault: %q", left)
	}

	_, err := v.Fetch(context.Background(), awsRefs["AWS_ACCESS_KEY_ID"])
	if !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "dynamic secret") {
		t.Fatalf("Vault.Fetch of a dynamic secret: %v", err)
	}
	if left := e.activeLeases("aws/sts/coily-s3/"); len(left) != 0 {
		t.Fatalf("Vault.Fetch left a lease: %q", left)
	}

	fed := map[string]Ref{
		"A": {Backend: BackendVault, Path: "aws/sts/coily-fed", Field: "access_key"},
		"S": {Backend: BackendVault, Path: "aws/sts/coily-fed", Field: "secret_key"},
		"T": {Backend: BackendVault, Path: "aws/sts/coily-fed", Field: "session_token"},
	}
	set, err := ks.Fetch(context.Background(), fed)
	if err != nil || len(set.Leases) != 1 || !e.keys.Holds(set.Values["A"], set.Values["S"], set.Values["T"]) {
		t.Fatalf("federation token: %v", err)
	}
	e.secrets = append(e.secrets, set.Values["S"], set.Values["T"])
	if got := e.issued(); got[len(got)-1].Action != "GetFederationToken" {
		t.Fatalf("issued %+v", got)
	}
	if err := ks.RevokeLease(context.Background(), set.Leases[0]); err != nil || e.leaseAlive(set.Leases[0].ID) {
		t.Fatalf("revoking the federation token's lease: %v", err)
	}
}

// deploy/vault-policy.hcl lets coily revoke and renew only the leases of
// its own roles: a lease of another path is refused (a token that may
// update sys/leases/revoke could otherwise revoke anyone's lease).
func TestVaultPolicyLimitsLeases(t *testing.T) {
	e := newVaultEnv(t)
	mountLeasedKV(t, e)
	if _, err := e.root.Logical().Write("leased/other/db", map[string]any{"password": canaryOther, "ttl": "1h"}); err != nil {
		t.Fatal(err)
	}
	sec, err := e.root.Logical().Read("leased/other/db")
	if err != nil || sec.LeaseID == "" {
		t.Fatalf("reading a leased secret as root: %v", err)
	}
	t.Setenv("VAULT_TOKEN", e.token(&api.TokenCreateRequest{NoDefaultPolicy: true}))
	v := e.vault(VaultConfig{})
	if err := v.RevokeLease(context.Background(), sec.LeaseID); !errors.Is(err, ErrDenied) {
		t.Fatalf("revoking another path's lease: %v, want ErrDenied", err)
	}
	if _, err := v.RenewLease(context.Background(), sec.LeaseID, time.Hour); !errors.Is(err, ErrDenied) {
		t.Fatalf("renewing another path's lease: %v, want ErrDenied", err)
	}
	if !e.leaseAlive(sec.LeaseID) {
		t.Fatal("the lease is gone")
	}
	// The token still works (a refusal by policy is not an invalid token).
	e.write("coily/github", map[string]any{"token": canaryToken})
	e.want(v, "vault:secret/coily/github#token", canaryToken)
}

// mountLeasedKV mounts Vault's leased passthrough backend at leased/: a
// KV whose reads carry renewable leases of the secret's "ttl".
func mountLeasedKV(t *testing.T, e *vaultEnv) {
	t.Helper()
	if err := e.root.Sys().Mount("leased", &api.MountInput{Type: "leased-kv"}); err != nil {
		t.Fatalf("mounting leased-kv (%s predates it? run scripts/vaultdev.sh): %v", vaulttest.Binary(), err)
	}
}

// A renewable lease is renewed by RenewLease (its expiry moves), and a
// lease that is gone is ErrNotFound.
func TestVaultRenewLease(t *testing.T) {
	e := newVaultEnv(t)
	mountLeasedKV(t, e)
	if _, err := e.root.Logical().Write("leased/coily/db", map[string]any{"password": canaryV1, "ttl": "20s"}); err != nil {
		t.Fatal(err)
	}
	t.Setenv("VAULT_TOKEN", e.srv.RootToken)
	v := e.vault(VaultConfig{})
	vals, lease, err := v.FetchGroup(context.Background(), []Ref{mustRef(t, "vault:leased/coily/db#password")})
	if err != nil || vals["password"] != canaryV1 || lease == nil || !lease.Renewable || lease.TTL != 20*time.Second {
		t.Fatalf("FetchGroup = %v, %+v; want the value and a renewable 20s lease", err, lease)
	}
	expiry := func() time.Time {
		sec, err := e.root.Sys().Lookup(lease.ID)
		if err != nil {
			t.Fatal(err)
		}
		at, err := time.Parse(time.RFC3339Nano, sec.Data["expire_time"].(string))
		if err != nil {
			t.Fatal(err)
		}
		return at
	}
	before := expiry()
	poll.Until(t, 10*time.Second, "a second to pass", func() bool { return time.Now().After(before.Add(-19 * time.Second)) })
	renewed, err := v.RenewLease(context.Background(), lease.ID, time.Minute)
	if err != nil || renewed.TTL <= 0 || renewed.ID != lease.ID {
		t.Fatalf("RenewLease = %+v, %v", renewed, err)
	}
	if after := expiry(); !after.After(before) {
		t.Fatalf("expiry %s did not move past %s", after, before)
	}
	if err := v.RevokeLease(context.Background(), lease.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := v.RenewLease(context.Background(), lease.ID, time.Minute); !errors.Is(err, ErrNotFound) {
		t.Fatalf("renewing a revoked lease: %v, want ErrNotFound", err)
	}
}

// Every field a caller needs from one KV secret comes from one read; the
// cache serves a later fetch only when it holds every field asked for,
// so values never mix two versions of a secret.
func TestVaultGroupedReadKV(t *testing.T) {
	e := newVaultEnv(t)
	e.write("coily/aws", map[string]any{"access_key_id": "AKID-v1", "secret_access_key": canaryToken + "-v1"})
	e.secrets = append(e.secrets, canaryToken+"-v1", canaryToken+"-v2")
	var mu sync.Mutex
	reads := 0
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/secret/data/coily/aws" {
			mu.Lock()
			reads++
			mu.Unlock()
		}
		proxyTo(t, e.srv.Addr, w, r)
	}))
	defer proxy.Close()
	t.Setenv("VAULT_ADDR", proxy.URL)
	t.Setenv("VAULT_TOKEN", e.srv.RootToken)
	ks := New(Config{Backends: map[string]Backend{BackendVault: e.vault(VaultConfig{})}, CacheTTL: time.Hour})
	count := func() int { mu.Lock(); defer mu.Unlock(); return reads }
	key := Ref{Backend: BackendVault, Path: "secret/coily/aws", Field: "access_key_id"}
	secret := Ref{Backend: BackendVault, Path: "secret/coily/aws", Field: "secret_access_key"}

	set, err := ks.Fetch(context.Background(), map[string]Ref{"K": key, "S": secret, "K2": key})
	if err != nil || set.Values["K"] != "AKID-v1" || set.Values["K2"] != "AKID-v1" || set.Values["S"] != canaryToken+"-v1" || set.Leases != nil {
		t.Fatalf("Fetch: %v", err)
	}
	if n := count(); n != 1 {
		t.Fatalf("%d reads of the secret for two fields, want 1", n)
	}
	ks.Drop()
	if _, err := ks.Fetch(context.Background(), map[string]Ref{"K": key}); err != nil || count() != 2 {
		t.Fatalf("Fetch of one field: %v, %d reads", err, count())
	}
	// A new version; the cache holds the key id of v1 only.
	e.write("coily/aws", map[string]any{"access_key_id": "AKID-v2", "secret_access_key": canaryToken + "-v2"})
	set, err = ks.Fetch(context.Background(), map[string]Ref{"K": key, "S": secret})
	if err != nil || set.Values["K"] != "AKID-v2" || set.Values["S"] != canaryToken+"-v2" || count() != 3 {
		t.Fatalf("Fetch after a new version: %v, %d reads; want both fields of v2 from one read", err, count())
	}
	// Now cached whole: no read.
	if _, err := ks.Fetch(context.Background(), map[string]Ref{"S": secret}); err != nil || count() != 3 {
		t.Fatalf("a cached fetch read again: %v, %d reads", err, count())
	}
}
