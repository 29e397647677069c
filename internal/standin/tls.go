package standin

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"coily.dev/coily/internal/testlog"
)

// CA is a throwaway certificate authority for one test. Clients trust it
// through CertFile: SSL_CERT_FILE (gh, Go, curl), GIT_SSL_CAINFO (git),
// NODE_EXTRA_CA_CERTS (node, npm), PIP_CERT (pip); Env returns them all.
type CA struct {
	CertFile string // the CA certificate, PEM, in t.TempDir()
	CertPEM  []byte
	Pool     *x509.CertPool // holds only this CA

	cert *x509.Certificate
	key  crypto.Signer
}

// TLS creates a CA for t and writes its certificate to t.TempDir().
func TLS(t testing.TB) *CA {
	t.Helper()
	ca, err := newCA(t.TempDir())
	if err != nil {
		t.Fatalf("standin: test CA: %v", err)
	}
	return ca
}

func newCA(dir string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate CA key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "coily standin test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("create CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("parse CA certificate: %w", err)
	}
	ca := &CA{
		CertFile: filepath.Join(dir, "ca.pem"),
		CertPEM:  pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		Pool:     x509.NewCertPool(),
		cert:     cert,
		key:      key,
	}
	ca.Pool.AddCert(cert)
	if err := os.WriteFile(ca.CertFile, ca.CertPEM, 0o644); err != nil {
		return nil, fmt.Errorf("write CA certificate: %w", err)
	}
	return ca, nil
}

// Env returns the environment variables that make git, gh, npm, pip and
// curl trust the CA (and only it: SSL_CERT_FILE replaces the system
// roots). REQUESTS_CA_BUNDLE is set too because, when set, it overrides
// pip's --cert and PIP_CERT.
func (ca *CA) Env() []string {
	var env []string
	for _, k := range []string{"SSL_CERT_FILE", "GIT_SSL_CAINFO", "NODE_EXTRA_CA_CERTS", "PIP_CERT", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE"} {
		env = append(env, k+"="+ca.CertFile)
	}
	return env
}

// Client returns an HTTP client that trusts only the CA.
func (ca *CA) Client() *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{RootCAs: ca.Pool, MinVersion: tls.VersionTLS12}
	tr.Proxy = nil
	return &http.Client{Transport: tr, Timeout: 30 * time.Second}
}

// Leaf issues a server certificate for 127.0.0.1, ::1, "localhost" and
// hosts (names or IP addresses).
func (ca *CA) Leaf(hosts ...string) (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("generate server key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: "localhost"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     []string{"localhost"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, key.Public(), ca.key)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("create server certificate: %w", err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}

// Server is an HTTPS server started by CA.Serve.
type Server struct {
	URL    string // "https://127.0.0.1:PORT"
	Host   string // "127.0.0.1:PORT"
	Port   string // "PORT"
	CAFile string // the PEM file of the CA that signed its certificate
}

// Serve serves h over TLS on 127.0.0.1 with a certificate for 127.0.0.1,
// "localhost" and hosts, until t's cleanup. It offers HTTP/1.1 alone.
func (ca *CA) Serve(t testing.TB, h http.Handler, hosts ...string) *Server {
	t.Helper()
	return ca.serve(t, h, false, hosts)
}

// ServeH2 is Serve offering HTTP/2 first, then HTTP/1.1 (by ALPN), as
// api.github.com does.
func (ca *CA) ServeH2(t testing.TB, h http.Handler, hosts ...string) *Server {
	t.Helper()
	return ca.serve(t, h, true, hosts)
}

func (ca *CA) serve(t testing.TB, h http.Handler, h2 bool, hosts []string) *Server {
	t.Helper()
	leaf, err := ca.Leaf(hosts...)
	if err != nil {
		t.Fatalf("standin: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("standin: listen: %v", err)
	}
	ts := httptest.NewUnstartedServer(h)
	ts.Listener.Close()
	ts.Listener = ln
	ts.EnableHTTP2 = h2
	ts.TLS = &tls.Config{Certificates: []tls.Certificate{leaf}, MinVersion: tls.VersionTLS12}
	ts.Config.ErrorLog = log.New(testlog.T(t), "standin: ", 0)
	ts.StartTLS()
	t.Cleanup(ts.Close)
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	return &Server{URL: ts.URL, Host: ln.Addr().String(), Port: port, CAFile: ca.CertFile}
}

// serial returns a random certificate serial number.
func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		panic(fmt.Sprintf("standin: crypto/rand: %v", err))
	}
	return n
}
