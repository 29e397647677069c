package witness

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"time"

	fnote "github.com/transparency-dev/formats/note"
	"golang.org/x/mod/sumdb/note"

	"coily.dev/coily/audit"
)

// ErrBadCosignature is wrapped by every error checking a cosignature.
var ErrBadCosignature = errors.New("witness: bad cosignature")

// GenerateKey makes a witness's Ed25519 cosigning key named name: the
// private key (secret) and its cosignature/v1 verifier key (published,
// pinned by whoever checks its cosignatures).
func GenerateKey(name string) (skey, vkey string, err error) {
	skey, plain, err := note.GenerateKey(rand.Reader, name)
	if err != nil {
		return "", "", fmt.Errorf("witness: key: %w", err)
	}
	vkey, err = fnote.VKeyToCosignatureV1(plain)
	if err != nil {
		return "", "", fmt.Errorf("witness: key: %w", err)
	}
	return skey, vkey, nil
}

// VerifierOf is the cosignature/v1 verifier key of the private key
// skey (PRIVATE+KEY+<name>+<hash>+<base64 of 0x01 and the Ed25519 seed>).
func VerifierOf(skey string) (string, error) {
	signer, err := note.NewSigner(skey)
	if err != nil {
		return "", fmt.Errorf("witness: key: %w", err)
	}
	parts := strings.SplitN(skey, "+", 5) // PRIVATE, KEY, name, hash, key: base64 has '+'
	if len(parts) != 5 {
		return "", errors.New("witness: key: not a note key")
	}
	raw, err := base64.StdEncoding.DecodeString(parts[4])
	if err != nil || len(raw) != 1+ed25519.SeedSize {
		return "", errors.New("witness: key: not an Ed25519 note key")
	}
	pub := ed25519.NewKeyFromSeed(raw[1:]).Public().(ed25519.PublicKey)
	plain, err := note.NewEd25519VerifierKey(signer.Name(), pub)
	if err != nil {
		return "", fmt.Errorf("witness: key: %w", err)
	}
	v, err := fnote.VKeyToCosignatureV1(plain)
	if err != nil {
		return "", fmt.Errorf("witness: key: %w", err)
	}
	return v, nil
}

// CheckKey checks that vkey is a witness's verifier key (cosignature/v1,
// or a plain Ed25519 note key, taken as its cosignature/v1 twin).
func CheckKey(vkey string) error {
	if _, err := fnote.NewVerifierForCosignatureV1(strings.TrimSpace(vkey)); err != nil {
		return fmt.Errorf("witness: verifier key: %w", err)
	}
	return nil
}

// cosign cosigns the checkpoint text (the note's text, ending in '\n')
// and returns the signature line.
func cosign(s note.Signer, text []byte) ([]byte, error) {
	msg, err := note.Sign(&note.Note{Text: string(text)}, s)
	if err != nil {
		return nil, fmt.Errorf("witness: cosigning: %w", err)
	}
	_, sig, _ := splitNote(msg)
	return sig, nil
}

// CheckCosignature checks that sigs (signature lines: a witness's
// response, untrusted) hold a cosignature/v1 of the signed checkpoint's
// text by the witness key vkey, and returns the time it cosigned at.
func CheckCosignature(checkpoint, sigs []byte, vkey string) (time.Time, error) {
	if len(sigs) > MaxCosignature {
		return time.Time{}, fmt.Errorf("%w: longer than %d bytes", ErrBadCosignature, MaxCosignature)
	}
	text, _, ok := splitNote(checkpoint)
	if !ok {
		return time.Time{}, fmt.Errorf("%w: the checkpoint is not a signed note", ErrBadCosignature)
	}
	msg := append(append(append([]byte{}, text...), '\n'), sigs...)
	return Cosigned(msg, vkey)
}

// Cosigned checks that the signed note msg (untrusted) carries a
// cosignature/v1 by the witness key vkey, and returns its time.
func Cosigned(msg []byte, vkey string) (time.Time, error) {
	if len(msg) > audit.MaxCheckpoint+MaxCosignature {
		return time.Time{}, fmt.Errorf("%w: longer than %d bytes", ErrBadCosignature, audit.MaxCheckpoint+MaxCosignature)
	}
	v, err := fnote.NewVerifierForCosignatureV1(strings.TrimSpace(vkey))
	if err != nil {
		return time.Time{}, fmt.Errorf("witness: verifier key: %w", err)
	}
	n, err := note.Open(msg, note.VerifierList(v))
	if err != nil {
		return time.Time{}, fmt.Errorf("%w: no cosignature by %s: %w", ErrBadCosignature, v.Name(), err)
	}
	for _, s := range n.Sigs {
		if s.Name == v.Name() && s.Hash == v.KeyHash() {
			t, err := fnote.CoSigV1Timestamp(s)
			if err != nil {
				return time.Time{}, fmt.Errorf("%w: %w", ErrBadCosignature, err)
			}
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("%w: no cosignature by %s", ErrBadCosignature, v.Name())
}
