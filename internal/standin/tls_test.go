package standin

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
)

func TestTLSServesForLoopbackNamesAndGivenHosts(t *testing.T) {
	ca := TLS(t)
	s := ca.Serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "hello "+r.Host)
	}), "git.example")
	if !strings.HasPrefix(s.Host, "127.0.0.1:") || s.URL != "https://"+s.Host {
		t.Fatalf("server at %q (%q), want 127.0.0.1 only", s.URL, s.Host)
	}
	pemBytes, err := os.ReadFile(s.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := pem.Decode(pemBytes); b == nil || b.Type != "CERTIFICATE" {
		t.Fatalf("CA file %s holds no PEM certificate", s.CAFile)
	}

	for _, url := range []string{s.URL, "https://localhost:" + s.Port} {
		resp, err := ca.Client().Get(url)
		if err != nil {
			t.Fatalf("GET %s: %v", url, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.HasPrefix(string(body), "hello ") {
			t.Errorf("GET %s = %q", url, body)
		}
	}
	for name, wantOK := range map[string]bool{"git.example": true, "other.example": false} {
		conn, err := tls.Dial("tcp", s.Host, &tls.Config{RootCAs: ca.Pool, ServerName: name})
		if err == nil {
			conn.Close()
		}
		if (err == nil) != wantOK {
			t.Errorf("TLS to %s: err = %v, want success %v", name, err, wantOK)
		}
	}

	// Another test's CA, or the system roots, must not trust the server.
	other := TLS(t)
	if _, err := other.Client().Get(s.URL); err == nil {
		t.Error("a client trusting another CA reached the server")
	}
	var unknown x509.UnknownAuthorityError
	if _, err := tls.Dial("tcp", s.Host, &tls.Config{ServerName: "localhost"}); err == nil || !asUnknownAuthority(err, &unknown) {
		t.Errorf("the system roots: err = %v, want an unknown authority", err)
	}
}

func asUnknownAuthority(err error, target *x509.UnknownAuthorityError) bool {
	var cv *tls.CertificateVerificationError
	if ok := errors.As(err, &cv); ok {
		return errors.As(cv.Err, target)
	}
	return false
}

func TestTLSServerClosedAtCleanup(t *testing.T) {
	var host string
	t.Run("inner", func(t *testing.T) {
		host = TLS(t).Serve(t, http.NotFoundHandler()).Host
	})
	if c, err := net.Dial("tcp", host); err == nil {
		c.Close()
		t.Fatalf("%s still accepts connections after the test's cleanup", host)
	}
}
