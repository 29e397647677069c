package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"coily.dev/coily/cli"
	"coily.dev/coily/internal/etcdtest"
	"coily.dev/coily/store"
	"coily.dev/coily/store/etcdstore"
)

// etcdFiles are the files `coily … --state etcd://` reads to reach a
// cluster: its CA, a client certificate and key, the seal key.
type etcdFiles struct {
	ca, cert, key, seal string
	sealKey             []byte
}

func (f etcdFiles) args(url string) []string {
	return []string{"--to", url, "--etcd-ca", f.ca, "--etcd-cert", f.cert, "--etcd-key", f.key, "--state-seal-key", f.seal}
}

func writeEtcdFiles(t *testing.T, c *etcdtest.Cluster) etcdFiles {
	t.Helper()
	dir := t.TempDir()
	f := etcdFiles{ca: c.CAFile(), cert: filepath.Join(dir, "cert.pem"), key: filepath.Join(dir, "key.pem"), seal: filepath.Join(dir, "seal.key"),
		sealKey: make([]byte, 32)}
	rand.Read(f.sealKey)
	crt := c.ClientTLS().Certificates[0]
	kder, err := x509.MarshalECPrivateKey(crt.PrivateKey.(*ecdsa.PrivateKey))
	if err != nil {
		t.Fatal(err)
	}
	for path, data := range map[string][]byte{
		f.cert: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: crt.Certificate[0]}),
		f.key:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}),
		f.seal: f.sealKey,
	} {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

// stateURL names the cluster's members as --state does.
func stateURL(c *etcdtest.Cluster, cluster string) string {
	var hosts []string
	for _, e := range c.Endpoints() {
		hosts = append(hosts, strings.TrimPrefix(e, "https://"))
	}
	return "etcd://" + strings.Join(hosts, ",") + "/" + cluster
}

// TestCLIStateMigrate: a state file filled through store's API moves to
// a real 3-member cluster: a dry run writes nothing; the copy prints
// counts and no secret; in etcd the lockout is in force and the key opens
// with the seal key; a second copy into the same trust point is refused,
// and so is a file a server holds.
func TestCLIStateMigrate(t *testing.T) {
	c := etcdtest.Start(t, 3, etcdtest.Options{})
	files := writeEtcdFiles(t, c)
	now := time.Now()
	path := filepath.Join(t.TempDir(), "coily.db")
	db, err := store.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	secret := []byte("0123456789abcdef0123456789abcdef")
	if err := db.SetLockout(store.Stop{Active: true, By: "alice@", Reason: "stolen laptop", Since: now}); err != nil {
		t.Fatal(err)
	}
	if _, err := db.IssueKey("sb", secret, now); err != nil {
		t.Fatal(err)
	}
	if ok, _, err := db.Take("alice@\x00gh", store.Rate{PerMinute: 1, Burst: 1}, now); !ok || err != nil {
		t.Fatal(ok, err)
	}

	args := append([]string{"state", "migrate", "--from", path}, files.args(stateURL(c, "team"))...)
	held := runCoily(t, nil, args...)
	if held.code != cli.ExitStateBusy || !strings.Contains(held.stderr, "stop the server") {
		t.Fatalf("migrate of a file held open: %+v", held)
	}
	db.Close()

	dry := runCoily(t, nil, append(args, "--dry-run")...)
	if dry.code != 0 || !strings.Contains(dry.stdout, "would copy") || !strings.Contains(dry.stdout, "lockout on") {
		t.Fatalf("dry run: %+v", dry)
	}
	s, err := etcdstore.Open(context.Background(), etcdstore.Config{Endpoints: c.Endpoints(), TLS: c.ClientTLS(), Prefix: "/coily/team/", SealKey: files.sealKey})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if st, err := s.Stops(); err != nil || st.Lockout.Active {
		t.Fatalf("after a dry run: %+v, %v", st, err)
	}

	r := runCoily(t, nil, args...)
	if r.code != 0 || !strings.Contains(r.stdout, "lockout on") || !strings.Contains(r.stdout, "1 signing key(s)") ||
		!strings.Contains(r.stdout, "1 rate bucket(s)") || !strings.Contains(r.stdout, "stay in "+path) {
		t.Fatalf("migrate: %+v", r)
	}
	for _, enc := range []string{string(secret), hex.EncodeToString(secret), base64.StdEncoding.EncodeToString(secret)} {
		if strings.Contains(r.stdout+r.stderr+dry.stdout, enc) {
			t.Fatalf("migrate printed the sandbox's secret:\n%s", r.stdout)
		}
	}
	if st, err := s.Stops(); err != nil || !st.Lockout.Active || st.Lockout.Reason != "stolen laptop" {
		t.Fatalf("the lockout in etcd: %+v, %v", st, err)
	}
	if k, err := s.Key("sb"); err != nil || !bytes.Equal(k.Secret, secret) {
		t.Fatalf("the key in etcd: %v", err)
	}

	again := runCoily(t, nil, args...)
	if again.code != 1 || !strings.Contains(again.stderr, "already holds state") {
		t.Fatalf("a second migrate into the same trust point: %+v", again)
	}
}

// TestCLIStateMigrateRefusesHostileCluster: a CLUSTER name that could
// reach another trust point's keys (or is not one name) is refused before
// anything is read or dialled.
func TestCLIStateMigrateRefusesHostileCluster(t *testing.T) {
	dir := t.TempDir()
	ca := filepath.Join(dir, "ca.pem")
	seal := filepath.Join(dir, "seal")
	if err := os.WriteFile(ca, selfSigned(t), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(seal, make([]byte, 32), 0o600); err != nil {
		t.Fatal(err)
	}
	from := filepath.Join(dir, "missing.db")
	for _, name := range []string{"", ".", "..", "../other", "team/../other", "a/b", "a%2fb", "team/", "team\n", "te am",
		"té", "*", "team?x", "team#x", strings.Repeat("x", 65)} {
		r := runCoily(t, nil, "state", "migrate", "--from", from, "--to", "etcd://127.0.0.1:1/"+name,
			"--etcd-ca", ca, "--etcd-user", "u", "--etcd-password-file", seal, "--state-seal-key", seal)
		if r.code != cli.ExitUsage || !strings.Contains(r.stderr, "cluster's name") {
			t.Errorf("cluster %q: %+v", name, r)
		}
	}
}
