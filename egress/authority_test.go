package egress

import (
	"crypto/x509"
	"testing"
	"time"
)

func TestAuthority(t *testing.T) {
	now := time.Now()
	ca, err := NewAuthority([]string{"api.github.com", "uploads.github.com"}, time.Hour, now)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.Certificate())
	leaf, err := ca.Leaf("API.github.com")
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := ca.Leaf("api.github.com"); again != leaf {
		t.Error("a second leaf for the same host was minted: want the cached one")
	}
	if _, err := leaf.Leaf.Verify(x509.VerifyOptions{DNSName: "api.github.com", Roots: roots, CurrentTime: now}); err != nil {
		t.Errorf("leaf does not verify: %v", err)
	}
	if _, err := leaf.Leaf.Verify(x509.VerifyOptions{DNSName: "api.github.com", Roots: roots, CurrentTime: now.Add(2 * time.Hour)}); err == nil {
		t.Error("leaf verifies after the CA's validity")
	}
	if _, err := ca.Leaf("github.com"); err == nil {
		t.Error("a leaf for a host not inspected was minted")
	}
	if c := ca.Certificate(); !c.IsCA || !c.PermittedDNSDomainsCritical || len(c.PermittedDNSDomains) != 2 || c.MaxPathLenZero != true {
		t.Errorf("CA certificate constraints: %+v", c.PermittedDNSDomains)
	}
	if _, err := NewAuthority(nil, time.Hour, now); err == nil {
		t.Error("a CA without hosts")
	}
	for _, h := range []string{"*.github.com", "GitHub.com", "github.com:443", "10.0.0.1", "", "a..b"} {
		if _, err := NewAuthority([]string{h}, time.Hour, now); err == nil {
			t.Errorf("NewAuthority(%q) succeeded", h)
		}
	}
}
