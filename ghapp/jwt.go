package ghapp

import (
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// JWT timing: GitHub refuses an exp more than 10 minutes ahead; iat is
// set in the past to allow for clock drift, as GitHub advises.
const (
	jwtBackdate = 60 * time.Second
	jwtLifetime = 9 * time.Minute // after now: exp - iat is 10 minutes
)

// minKeyBits is the smallest RSA key accepted (GitHub issues 2048-bit
// keys).
const minKeyBits = 2048

// ParsePrivateKey reads an App's private key as GitHub hands it out: a
// PEM "RSA PRIVATE KEY" (PKCS #1) or "PRIVATE KEY" (PKCS #8) block, or
// that PEM file in base64 on one line (a keychain that keeps one line).
// Errors never quote the value.
func ParsePrivateKey(s string) (*rsa.PrivateKey, error) {
	data := []byte(strings.TrimSpace(s))
	if !strings.HasPrefix(string(data), "-----BEGIN") {
		dec, err := base64.StdEncoding.DecodeString(string(data))
		if err != nil {
			return nil, errors.New("neither a PEM private key nor one in base64")
		}
		data = dec
	}
	block, rest := pem.Decode(data)
	if block == nil {
		return nil, errors.New("no PEM block")
	}
	if strings.TrimSpace(string(rest)) != "" {
		return nil, errors.New("more than one PEM block")
	}
	if len(block.Headers) > 0 {
		return nil, errors.New("an encrypted PEM block (store the key without a passphrase)")
	}
	var key any
	var err error
	switch block.Type {
	case "RSA PRIVATE KEY":
		key, err = x509.ParsePKCS1PrivateKey(block.Bytes)
	case "PRIVATE KEY":
		key, err = x509.ParsePKCS8PrivateKey(block.Bytes)
	default:
		return nil, fmt.Errorf("a PEM block of type %q, not an RSA private key", block.Type)
	}
	if err != nil {
		return nil, errors.New("a malformed RSA private key")
	}
	rk, ok := key.(*rsa.PrivateKey)
	if !ok {
		return nil, errors.New("not an RSA key (GitHub Apps sign with RS256)")
	}
	if rk.N.BitLen() < minKeyBits {
		return nil, fmt.Errorf("an RSA key of %d bits (at least %d)", rk.N.BitLen(), minKeyBits)
	}
	return rk, nil
}

// AppJWT signs the JWT that authenticates as the App: RS256, iat 60 s
// before now, exp 9 minutes after (10 minutes after iat), iss the App's
// id (a number) or client id (a string).
func AppJWT(key *rsa.PrivateKey, appID string, now time.Time) (string, error) {
	if appID == "" {
		return "", errors.New("no App id")
	}
	var iss any = appID
	if n, err := strconv.ParseInt(appID, 10, 64); err == nil {
		iss = n
	}
	header, _ := json.Marshal(map[string]string{"alg": "RS256", "typ": "JWT"})
	claims, err := json.Marshal(map[string]any{
		"iat": now.Add(-jwtBackdate).Unix(),
		"exp": now.Add(jwtLifetime).Unix(),
		"iss": iss,
	})
	if err != nil {
		return "", err
	}
	enc := base64.RawURLEncoding
	signing := enc.EncodeToString(header) + "." + enc.EncodeToString(claims)
	sum := sha256.Sum256([]byte(signing))
	sig, err := rsa.SignPKCS1v15(rand.Reader, key, crypto.SHA256, sum[:])
	if err != nil {
		return "", fmt.Errorf("sign the App's JWT: %w", err)
	}
	return signing + "." + enc.EncodeToString(sig), nil
}
