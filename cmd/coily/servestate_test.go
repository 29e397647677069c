package main

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

	"github.com/spf13/pflag"
)

var stateURLCases = []struct {
	in        string
	endpoints string
	prefix    string
}{
	{"etcd://10.0.0.1:2379,10.0.0.2:2379,etcd3.example:2379/team", "https://10.0.0.1:2379 https://10.0.0.2:2379 https://etcd3.example:2379", "/coily/team/"},
	{"etcd://[::1]:2379/a.b_c-d", "https://[::1]:2379", "/coily/a.b_c-d/"},
	// Refused: no scheme or another, no cluster, a cluster that climbs,
	// nests, or is empty; a member without a port, with a bad one, with
	// userinfo or a path; an empty member.
	{"http://h:1/x", "", ""},
	{"etcd://h:2379", "", ""},
	{"etcd://h:2379/", "", ""},
	{"etcd://h:2379/..", "", ""},
	{"etcd://h:2379/.", "", ""},
	{"etcd://h:2379/a/b", "", ""},
	{"etcd://h:2379/a%2fb", "", ""},
	{"etcd://h/x", "", ""},
	{"etcd://h:0/x", "", ""},
	{"etcd://h:65536/x", "", ""},
	{"etcd://h:+1/x", "", ""},
	{"etcd://h:02379/x", "", ""},
	{"etcd://u@h:2379/x", "", ""},
	{"etcd://h:2379,/x", "", ""},
	{"etcd://:2379/x", "", ""},
	{"etcd://h\n:2379/x", "", ""},
	{"etcd://" + strings.Repeat("h:1,", 16) + "h:1/x", "", ""},
	{"etcd://h:1/" + strings.Repeat("x", 65), "", ""},
}

func TestParseStateURL(t *testing.T) {
	for _, c := range stateURLCases {
		eps, prefix, err := parseStateURL(c.in)
		if c.prefix == "" {
			if err == nil {
				t.Errorf("%q: accepted as %v %q", c.in, eps, prefix)
			}
			continue
		}
		if err != nil || strings.Join(eps, " ") != c.endpoints || prefix != c.prefix {
			t.Errorf("%q: %v %q %v, want %s %q", c.in, eps, prefix, err, c.endpoints, c.prefix)
		}
	}
}

// FuzzParseStateURL: whatever --state says, an accepted one names https
// members and a prefix of one path component under /coily/.
func FuzzParseStateURL(f *testing.F) {
	for _, c := range stateURLCases {
		f.Add(c.in)
	}
	f.Fuzz(func(t *testing.T, s string) {
		eps, prefix, err := parseStateURL(s)
		if err != nil {
			return
		}
		cluster, ok := strings.CutPrefix(prefix, "/coily/")
		if !ok || !strings.HasSuffix(cluster, "/") || strings.Count(cluster, "/") != 1 || cluster == "./" || cluster == "../" {
			t.Fatalf("%q: prefix %q", s, prefix)
		}
		for _, e := range eps {
			if !strings.HasPrefix(e, "https://") || strings.ContainsAny(e[len("https://"):], "/@?#\n ") {
				t.Fatalf("%q: endpoint %q", s, e)
			}
		}
	})
}

// --state etcd:// is refused without TLS to the members, without this
// host's credentials, and without a seal key of 32 bytes open to its
// owner only; the etcd flags alone are refused too.
func TestStateFlagsRefuse(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, data []byte, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	key32 := write("seal", make([]byte, 32), 0o600)
	open := write("seal-open", make([]byte, 32), 0o644)
	short := write("seal-short", make([]byte, 31), 0o600)
	long := write("seal-long", make([]byte, 33), 0o600)
	pw := write("pw", []byte("secret\n"), 0o600)
	ca := write("ca.pem", []byte("not a certificate"), 0o600)
	goodCA := write("good-ca.pem", selfSigned(t), 0o600)
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"flags alone", []string{"--state-seal-key", key32}, "apply with --state"},
		{"no ca", []string{"--state", "etcd://h:1/x", "--etcd-user", "u", "--etcd-password-file", pw, "--state-seal-key", key32}, "--etcd-ca"},
		{"bad ca", []string{"--state", "etcd://h:1/x", "--etcd-ca", ca}, "no PEM"},
		{"bad url", []string{"--state", "etcd://h/x"}, "member"},
		{"no credentials", []string{"--state", "etcd://h:1/x", "--etcd-ca", goodCA, "--state-seal-key", key32}, "credentials"},
		{"half a key pair", []string{"--state", "etcd://h:1/x", "--etcd-ca", goodCA, "--etcd-cert", goodCA}, "go together"},
		{"user alone", []string{"--state", "etcd://h:1/x", "--etcd-ca", goodCA, "--etcd-user", "u"}, "go together"},
		{"no seal key", []string{"--state", "etcd://h:1/x", "--etcd-ca", goodCA, "--etcd-user", "u", "--etcd-password-file", pw}, "--state-seal-key"},
		{"seal key open", []string{"--state", "etcd://h:1/x", "--etcd-ca", goodCA, "--etcd-user", "u", "--etcd-password-file", pw, "--state-seal-key", open}, "chmod 600"},
		{"host name alone", []string{"--host-name", "a"}, "apply with --state"},
		{"host name with a slash", []string{"--state", "etcd://h:1/x", "--etcd-ca", goodCA, "--etcd-user", "u", "--etcd-password-file", pw, "--state-seal-key", key32, "--host-name", "a/b"}, "--host-name"},
		{"host name too long", []string{"--state", "etcd://h:1/x", "--etcd-ca", goodCA, "--etcd-user", "u", "--etcd-password-file", pw, "--state-seal-key", key32, "--host-name", strings.Repeat("a", 65)}, "--host-name"},
		{"audit keep too short", []string{"--state", "etcd://h:1/x", "--etcd-ca", goodCA, "--etcd-user", "u", "--etcd-password-file", pw, "--state-seal-key", key32, "--audit-keep", "1m"}, "--audit-keep"},
	} {
		fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
		f := registerStateFlags(fs)
		if err := fs.Parse(c.args); err != nil {
			t.Fatal(err)
		}
		if _, err := f.config("node"); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
	for path, want := range map[string]string{open: "chmod 600", short: "not 32 bytes", long: "not 32 bytes"} {
		if _, err := readSealKey(path); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", filepath.Base(path), err, want)
		}
	}
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	f := registerStateFlags(fs)
	if err := fs.Parse([]string{"--state", "etcd://h:1/x", "--etcd-ca", goodCA, "--etcd-user", "u", "--etcd-password-file", pw, "--state-seal-key", key32}); err != nil {
		t.Fatal(err)
	}
	sh, err := f.config("node-1")
	if err != nil || sh.cfg.Password != "secret" || len(sh.cfg.SealKey) != 32 || sh.cfg.TLS.RootCAs == nil || sh.cfg.Prefix != "/coily/x/" ||
		sh.host != "node-1" || sh.cfg.AuditKeep != 7*24*time.Hour {
		t.Fatalf("a complete --state: %+v, %v", sh, err)
	}
	if err := fs.Parse([]string{"--host-name", "h2"}); err != nil {
		t.Fatal(err)
	}
	if sh, err := f.config("node-1"); err != nil || sh.host != "h2" {
		t.Fatalf("--host-name h2: %+v, %v", sh, err)
	}
}

// selfSigned is a CA certificate in PEM.
func selfSigned(t *testing.T) []byte {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "ca"}, NotBefore: time.Now(),
		NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}
