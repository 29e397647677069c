package cabundle

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestPool(t *testing.T) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "pool test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	write := func(name, data string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good.pem", string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})))
	pool, err := Pool(good)
	if err != nil || pool.Equal(x509.NewCertPool()) {
		t.Fatalf("Pool(a CA) = %v, %v; want a pool holding it", pool, err)
	}
	for _, c := range []struct{ name, path, err string }{
		{"not DER inside", write("bad-der.pem", testCA), "no usable certificate"},
		{"key", write("key.pem", testKey), `type "PRIVATE KEY"`},
		{"missing", filepath.Join(dir, "nope.pem"), "no such file"},
	} {
		if _, err := Pool(c.path); err == nil || !strings.Contains(err.Error(), c.err) {
			t.Errorf("%s: Pool = %v, want an error with %q", c.name, err, c.err)
		}
	}
}
