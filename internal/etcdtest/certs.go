package etcdtest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"time"
)

// ForwardAddr is the address a test gives, inside network namespaces of
// its own, to a forwarder in front of the members (Cluster.LinkOn) that a
// client in another namespace reaches over a veth pair: the members'
// certificate names it beside 127.0.0.1, so that client verifies the
// member behind the forwarder. Outside such namespaces nothing has it.
var ForwardAddr = netip.MustParseAddr("10.99.0.1")

// pki is the cluster's certificate authority and the certificates it
// signed, as files (for etcd) and as parsed values (for clients).
type pki struct {
	caFile, memberCert, memberKey string
	pool                          *x509.CertPool
	ca                            *x509.Certificate
	caKey                         *ecdsa.PrivateKey
	client                        tls.Certificate
}

// newPKI makes a CA, one certificate the members use as servers and as
// peers' clients (SAN 127.0.0.1, ForwardAddr and localhost), and one
// client certificate, writing the CA and the members' pair under dir.
func newPKI(dir string) (*pki, error) {
	p := &pki{}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "etcdtest CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	if p.ca, err = x509.ParseCertificate(caDER); err != nil {
		return nil, err
	}
	p.caKey = caKey
	p.pool = x509.NewCertPool()
	p.pool.AddCert(p.ca)
	p.caFile = filepath.Join(dir, "ca.pem")
	if err := writePEM(p.caFile, "CERTIFICATE", caDER); err != nil {
		return nil, err
	}

	memberDER, memberKey, err := p.sign(2, "etcdtest member", x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth)
	if err != nil {
		return nil, err
	}
	p.memberCert, p.memberKey = filepath.Join(dir, "member.pem"), filepath.Join(dir, "member-key.pem")
	if err := writePEM(p.memberCert, "CERTIFICATE", memberDER); err != nil {
		return nil, err
	}
	keyDER, err := x509.MarshalECPrivateKey(memberKey)
	if err != nil {
		return nil, err
	}
	if err := writePEM(p.memberKey, "EC PRIVATE KEY", keyDER); err != nil {
		return nil, err
	}

	clientDER, clientKey, err := p.sign(3, "coily", x509.ExtKeyUsageClientAuth)
	if err != nil {
		return nil, err
	}
	p.client = tls.Certificate{Certificate: [][]byte{clientDER}, PrivateKey: clientKey}
	return p, nil
}

// sign issues a certificate for 127.0.0.1, ForwardAddr and localhost
// with the given uses.
func (p *pki) sign(serial int64, cn string, uses ...x509.ExtKeyUsage) ([]byte, *ecdsa.PrivateKey, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  uses,
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1), net.IP(ForwardAddr.AsSlice())},
		DNSNames:     []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.ca, &key.PublicKey, p.caKey)
	if err != nil {
		return nil, nil, fmt.Errorf("etcdtest: sign %s: %w", cn, err)
	}
	return der, key, nil
}

func writePEM(path, typ string, der []byte) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600)
}

// ClientFiles writes the client certificate and its key (mode 0600) under
// dir, for a client that reads them from files (coily's --etcd-cert and
// --etcd-key), and returns their paths and the CA's.
func (c *Cluster) ClientFiles(dir string) (ca, cert, key string, err error) {
	cert, key = filepath.Join(dir, "client.pem"), filepath.Join(dir, "client-key.pem")
	if err := writePEM(cert, "CERTIFICATE", c.pki.client.Certificate[0]); err != nil {
		return "", "", "", err
	}
	keyDER, err := x509.MarshalECPrivateKey(c.pki.client.PrivateKey.(*ecdsa.PrivateKey))
	if err != nil {
		return "", "", "", err
	}
	if err := writePEM(key, "EC PRIVATE KEY", keyDER); err != nil {
		return "", "", "", err
	}
	return c.pki.caFile, cert, key, nil
}
