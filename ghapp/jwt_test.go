package ghapp

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"strings"
	"testing"
	"time"
)

func TestAppJWT(t *testing.T) {
	k := rsaKey(t)
	now := time.Unix(1_700_000_000, 0)
	for _, tc := range []struct {
		appID string
		iss   any
	}{
		{"123", json.Number("123")},
		{"Iv1.abc123", "Iv1.abc123"},
	} {
		jwt, err := AppJWT(k, tc.appID, now)
		if err != nil {
			t.Fatal(err)
		}
		h, c := verifyJWT(t, jwt, &k.PublicKey)
		if h["alg"] != "RS256" || h["typ"] != "JWT" || len(h) != 2 {
			t.Errorf("header %v", h)
		}
		if c["iat"] != json.Number("1699999940") || c["exp"] != json.Number("1700000540") || c["iss"] != tc.iss || len(c) != 3 {
			t.Errorf("claims %v: want iat now-60s, exp now+9m (10 minutes after iat), iss %v", c, tc.iss)
		}
	}
	if _, err := AppJWT(k, "", now); err == nil {
		t.Error("a JWT without an App id")
	}
}

func TestParsePrivateKey(t *testing.T) {
	k := rsaKey(t)
	pkcs1 := pkcs1PEM(k)
	p8, _ := x509.MarshalPKCS8PrivateKey(k)
	pkcs8 := string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: p8}))
	for name, s := range map[string]string{
		"pkcs1":                     pkcs1,
		"pkcs8":                     pkcs8,
		"base64 one line":           base64.StdEncoding.EncodeToString([]byte(pkcs1)),
		"surrounded by white space": "\n  " + pkcs1 + "\n\n",
	} {
		got, err := ParsePrivateKey(s)
		if err != nil || !got.Equal(k) {
			t.Errorf("%s: %v", name, err)
		}
	}

	ec, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	ecDER, _ := x509.MarshalPKCS8PrivateKey(ec)
	small, _ := rsa.GenerateKey(rand.Reader, 1024)
	encrypted := "-----BEGIN RSA PRIVATE KEY-----\nProc-Type: 4,ENCRYPTED\nDEK-Info: AES-128-CBC,00\n\n" +
		strings.SplitN(pkcs1, "\n", 2)[1]
	body := strings.SplitN(pkcs1, "\n", 3)[1] // a line of the key's base64
	for name, s := range map[string]string{
		"empty":          "",
		"garbage":        "not a key " + body,
		"ec key":         string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: ecDER})),
		"1024 bits":      pkcs1PEM(small),
		"two blocks":     pkcs1 + pkcs1,
		"trailing text":  pkcs1 + "x" + body,
		"encrypted":      encrypted,
		"certificate":    "-----BEGIN CERTIFICATE-----\n" + body + "\n-----END CERTIFICATE-----\n",
		"truncated":      pkcs1[:len(pkcs1)/2],
		"corrupt body":   strings.Replace(pkcs1, body[10:30], strings.Repeat("A", 20), 1),
		"openssh format": "-----BEGIN OPENSSH PRIVATE KEY-----\n" + body + "\n-----END OPENSSH PRIVATE KEY-----\n",
		"base64 garbage": base64.StdEncoding.EncodeToString([]byte("x" + body)),
		"bad base64":     "%%%" + body,
	} {
		_, err := ParsePrivateKey(s)
		if err == nil {
			t.Errorf("%s: accepted", name)
			continue
		}
		if strings.Contains(err.Error(), body[:16]) {
			t.Errorf("%s: the error quotes the value: %v", name, err)
		}
	}
}

func FuzzParsePrivateKey(f *testing.F) {
	k := rsaKey(f)
	pkcs1 := pkcs1PEM(k)
	for _, s := range []string{pkcs1, base64.StdEncoding.EncodeToString([]byte(pkcs1)), "", "-----BEGIN X-----\n-----END X-----\n", pkcs1[:100]} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		k, err := ParsePrivateKey(s)
		if err == nil && (k == nil || k.N.BitLen() < minKeyBits) {
			t.Fatalf("accepted a key of %v", k)
		}
	})
}
