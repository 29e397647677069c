// Package credref is the grammar of credential references
// (vault:<path>#<field>, keychain:<service>/<account>, file:<name>): what a
// policy names and package keystore fetches. It is apart from keystore so
// that parsing a policy does not pull in the credential backends.
package credref

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// Backend names.
const (
	Vault    = "vault"
	Keychain = "keychain"
	File     = "file"
)

// maxRefLen bounds a reference's length.
const maxRefLen = 1024

// Ref is a parsed credential reference.
//
// For vault, Path is the secret's path as the vault CLI takes it (mount
// included, e.g. "secret/coily/github") and Field the key within it. For
// keychain, Path is the service and Field the account ("coily/github" is
// service "coily", account "github"). For file, Path is the name.
type Ref struct {
	Backend string
	Path    string
	Field   string
}

// String returns the reference as written in a policy.
func (r Ref) String() string {
	switch r.Backend {
	case Vault:
		return r.Backend + ":" + r.Path + "#" + r.Field
	case Keychain:
		return r.Backend + ":" + r.Path + "/" + r.Field
	default:
		return r.Backend + ":" + r.Path
	}
}

// notQuoted ends the errors that do not quote what they refuse.
const notQuoted = "not quoted, as it may be the secret itself; a policy names a secret, never holds it"

// Parse parses a credential reference. Grammar:
//
//	vault:<path>#<field>      path: segments of [A-Za-z0-9._-] joined by "/"; field: non-empty, no "#"
//	keychain:<service>/<account>
//	file:<name>               name: [A-Za-z0-9._-]+
//
// References are printable UTF-8 without spaces, at most 1024 bytes; empty
// path segments, "." and ".." are refused.
func Parse(s string) (Ref, error) {
	if len(s) > maxRefLen {
		return Ref{}, fmt.Errorf("credential reference longer than %d bytes", maxRefLen)
	}
	if !utf8.ValidString(s) {
		return Ref{}, fmt.Errorf("credential reference is not valid UTF-8")
	}
	for _, r := range s {
		if r <= ' ' || r == 0x7f || (r >= 0x80 && r < 0xa0) {
			// Not quoted: what fails here may be a secret (a key's PEM)
			// pasted where its reference belongs.
			return Ref{}, fmt.Errorf("credential reference contains a space or control character: %s", notQuoted)
		}
	}
	backend, rest, ok := strings.Cut(s, ":")
	if !ok {
		return Ref{}, fmt.Errorf("credential reference has no backend (want vault:, keychain: or file:): %s", notQuoted)
	}
	switch backend {
	case Vault:
		path, field, ok := strings.Cut(rest, "#")
		if !ok || field == "" || strings.Contains(field, "#") {
			return Ref{}, fmt.Errorf("vault reference %q must be vault:<path>#<field>", s)
		}
		if err := checkPath(path, true); err != nil {
			return Ref{}, fmt.Errorf("vault reference %q: %w", s, err)
		}
		return Ref{Backend: backend, Path: path, Field: field}, nil
	case Keychain:
		service, account, ok := strings.Cut(rest, "/")
		if !ok || service == "" || account == "" {
			return Ref{}, fmt.Errorf("keychain reference %q must be keychain:<service>/<account>", s)
		}
		return Ref{Backend: backend, Path: service, Field: account}, nil
	case File:
		if err := checkPath(rest, false); err != nil {
			return Ref{}, fmt.Errorf("file reference %q: %w", s, err)
		}
		return Ref{Backend: backend, Path: rest}, nil
	default:
		if len(backend) > 16 || strings.ContainsFunc(backend, func(r rune) bool { return !(r >= 'a' && r <= 'z') }) {
			return Ref{}, fmt.Errorf("credential reference has an unknown backend (want vault, keychain or file): %s", notQuoted)
		}
		return Ref{}, fmt.Errorf("credential reference: unknown backend %q (want vault, keychain or file)", backend)
	}
}

// checkPath checks a vault path (segments joined by "/") or a file name.
func checkPath(p string, slashes bool) error {
	if p == "" {
		return fmt.Errorf("empty path")
	}
	segs := []string{p}
	if slashes {
		segs = strings.Split(p, "/")
	}
	for _, seg := range segs {
		if seg == "" || seg == "." || seg == ".." {
			return fmt.Errorf("path segment %q not allowed", seg)
		}
		for _, c := range []byte(seg) {
			if !NameByte(c) {
				return fmt.Errorf("character %q not allowed (want A-Z a-z 0-9 . _ -)", c)
			}
		}
	}
	return nil
}

// NameByte reports whether c may appear in a file: reference's name (or a
// vault path segment): A-Z a-z 0-9 . _ -.
func NameByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-'
}

// ValidName reports whether name is a valid file: reference name (or vault
// path segment): one or more NameBytes.
func ValidName(name []byte) bool {
	for _, c := range name {
		if !NameByte(c) {
			return false
		}
	}
	return len(name) > 0
}
