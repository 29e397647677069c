package egress

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"strings"
	"sync"
	"time"
)

// Authority is the certificate authority of one exec's TLS inspection:
// an ECDSA P-256 key that lives in memory only, a certificate valid for
// a short while and constrained to the inspected host names, and the
// leaf certificates it mints for those hosts on demand, each once.
type Authority struct {
	cert    *x509.Certificate
	key     *ecdsa.PrivateKey
	leafKey *ecdsa.PrivateKey // one key for every leaf of this exec
	pem     []byte
	hosts   []string

	mu     sync.Mutex
	leaves map[string]*tls.Certificate
}

// backdate covers a clock of the sandbox's tools slightly behind ours.
const backdate = 5 * time.Minute

// NewAuthority mints a CA for hosts (exact DNS names, lower case) valid
// from now for validity. Its certificate carries name constraints: even
// a client that trusts it accepts its leaves for hosts alone.
func NewAuthority(hosts []string, validity time.Duration, now time.Time) (*Authority, error) {
	if len(hosts) == 0 {
		return nil, errors.New("egress: an inspection CA needs at least one host")
	}
	for _, h := range hosts {
		if e, err := ParseEntry(h); err != nil || e.Suffix || e.Port != 0 || e.Host != h {
			return nil, fmt.Errorf("egress: inspected host %q must be one lower-case host name", h)
		}
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("egress: CA key: %w", err)
	}
	leafKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("egress: leaf key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:                serial(),
		Subject:                     pkix.Name{CommonName: "coily egress inspection CA (one exec)"},
		NotBefore:                   now.Add(-backdate),
		NotAfter:                    now.Add(validity),
		KeyUsage:                    x509.KeyUsageCertSign,
		BasicConstraintsValid:       true,
		IsCA:                        true,
		MaxPathLenZero:              true,
		PermittedDNSDomainsCritical: true,
		PermittedDNSDomains:         append([]string(nil), hosts...),
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("egress: CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("egress: CA certificate: %w", err)
	}
	return &Authority{cert: cert, key: key, leafKey: leafKey, hosts: append([]string(nil), hosts...),
		pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), leaves: map[string]*tls.Certificate{}}, nil
}

// CertPEM is the CA certificate, PEM: what the sandbox trusts.
func (a *Authority) CertPEM() []byte { return append([]byte(nil), a.pem...) }

// Certificate is the CA certificate.
func (a *Authority) Certificate() *x509.Certificate { return a.cert }

// Covers reports whether host is one the CA was minted for.
func (a *Authority) Covers(host string) bool {
	for _, h := range a.hosts {
		if h == host {
			return true
		}
	}
	return false
}

// Leaf is the certificate the proxy shows for host, minted on first use
// and cached for the exec. host must be one the CA covers.
func (a *Authority) Leaf(host string) (*tls.Certificate, error) {
	host = strings.ToLower(host)
	if !a.Covers(host) {
		return nil, fmt.Errorf("egress: no inspection of host %q", host)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if c := a.leaves[host]; c != nil {
		return c, nil
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: host},
		DNSNames:     []string{host},
		NotBefore:    a.cert.NotBefore,
		NotAfter:     a.cert.NotAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, a.cert, a.leafKey.Public(), a.key)
	if err != nil {
		return nil, fmt.Errorf("egress: leaf for %s: %w", host, err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	c := &tls.Certificate{Certificate: [][]byte{der, a.cert.Raw}, PrivateKey: a.leafKey, Leaf: leaf}
	a.leaves[host] = c
	return c, nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(fmt.Sprintf("egress: crypto/rand: %v", err)) // crypto/rand does not fail
	}
	return n
}
