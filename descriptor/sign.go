package descriptor

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
)

// Sign returns the signature of canonical under key: HMAC-SHA256 in
// lower-case hex. key must be KeySize bytes; Sign panics otherwise, since a
// short or empty key would sign silently with a guessable key.
func Sign(canonical []byte, key []byte) string {
	if len(key) != KeySize {
		panic(ErrKeySize)
	}
	m := hmac.New(sha256.New, key)
	m.Write(canonical)
	return hex.EncodeToString(m.Sum(nil))
}

// Verify checks that hmacHex is the signature of canonical under key, in
// constant time. A malformed signature (anything but 64 lower-case hex
// digits) or a mismatch is an *Error with CodeHMACFail. A key that is not
// KeySize bytes is ErrKeySize.
func Verify(canonical []byte, hmacHex string, key []byte) error {
	if len(key) != KeySize {
		return ErrKeySize
	}
	if !hmacRE().MatchString(hmacHex) {
		return &Error{Code: CodeHMACFail, Field: "hmac", Msg: "must be 64 lower-case hex digits"}
	}
	got, err := hex.DecodeString(hmacHex)
	if err != nil {
		return &Error{Code: CodeHMACFail, Field: "hmac", Msg: "must be 64 lower-case hex digits"}
	}
	m := hmac.New(sha256.New, key)
	m.Write(canonical)
	if !hmac.Equal(got, m.Sum(nil)) {
		return &Error{Code: CodeHMACFail, Field: "hmac", Msg: "signature does not match"}
	}
	return nil
}
