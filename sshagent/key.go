package sshagent

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"

	"golang.org/x/crypto/ssh"
)

// Bounds of a private key as stored.
const (
	maxPrivateKey = 16 << 10 // an RSA key of 16384 bits is about 12 KiB in PEM
	minRSABits    = 2048
)

// pemPrefix starts every private key file ssh-keygen writes.
const pemPrefix = "-----BEGIN "

// ParsePrivateKey reads a private key as stored in the keystore: the file
// ssh-keygen writes (OpenSSH or PEM format), or that file in standard
// base64 on one line (for stores that keep one line per value, like
// coily's credentials file). The key must be unencrypted (coily is what
// guards it) and an Ed25519, ECDSA or RSA (2048 bits or more) key. No
// error quotes the value.
func ParsePrivateKey(value string) (ssh.Signer, error) {
	data := []byte(strings.TrimSpace(value))
	defer clear(data) // best effort: value itself cannot be wiped (see the package doc)
	if len(data) > maxPrivateKey*2 {
		return nil, fmt.Errorf("the private key is longer than %d bytes", maxPrivateKey)
	}
	if !bytes.HasPrefix(data, []byte(pemPrefix)) {
		decoded, err := base64.StdEncoding.Strict().DecodeString(string(data))
		if err != nil || !bytes.HasPrefix(decoded, []byte(pemPrefix)) {
			return nil, errors.New("not a private key: want the file ssh-keygen writes (-----BEGIN OPENSSH PRIVATE KEY-----), or that file in base64 on one line")
		}
		defer clear(decoded)
		data = decoded
	}
	if len(data) > maxPrivateKey {
		return nil, fmt.Errorf("the private key is longer than %d bytes", maxPrivateKey)
	}
	raw, err := ssh.ParseRawPrivateKey(data)
	if err != nil {
		var pp *ssh.PassphraseMissingError
		if errors.As(err, &pp) {
			return nil, errors.New("the private key is encrypted with a passphrase: store it without one (ssh-keygen -p -N '')")
		}
		return nil, errors.New("the private key does not parse (an OpenSSH or PEM private key is expected)")
	}
	if err := checkKeyType(raw); err != nil {
		return nil, err
	}
	return ssh.NewSignerFromKey(raw)
}

// checkKeyType accepts Ed25519, ECDSA and RSA keys of minRSABits or more.
func checkKeyType(raw any) error {
	switch k := raw.(type) {
	case *ed25519.PrivateKey, ed25519.PrivateKey, *ecdsa.PrivateKey:
		return nil
	case *rsa.PrivateKey:
		if k.N.BitLen() < minRSABits {
			return fmt.Errorf("the RSA key has %d bits, fewer than %d", k.N.BitLen(), minRSABits)
		}
		return nil
	}
	return fmt.Errorf("a %T private key: want Ed25519, ECDSA or RSA", raw)
}
