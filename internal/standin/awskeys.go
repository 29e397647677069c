package standin

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base32"
	"encoding/base64"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"time"
)

// AWSKeys are the access keys the AWS stand-ins (S3, STS) accept, as IAM
// and STS hold them for a real account: long-term keys, and the temporary
// keys STS issued, each with its session token and expiry. A request
// signed with a temporary key is accepted only with its session token in
// X-Amz-Security-Token, signed, before the key expires.
type AWSKeys struct {
	mu     sync.Mutex
	keys   map[string]awsKey
	issued []IssuedKey
}

type awsKey struct {
	secret  string
	token   string    // temporary keys only
	expires time.Time // temporary keys only
}

// IssuedKey is a temporary key STS issued: its id and what it was issued
// for, never its secret or token.
type IssuedKey struct {
	AccessKey string
	Action    string // AssumeRole or GetFederationToken
	Caller    string // the long-term key that asked
	Subject   string // the role ARN, or the federated user's name
	Expires   time.Time
}

// NewAWSKeys returns a key store holding no key.
func NewAWSKeys() *AWSKeys { return &AWSKeys{keys: map[string]awsKey{}} }

// Add adds a long-term key.
func (k *AWSKeys) Add(accessKey, secret string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.keys[accessKey] = awsKey{secret: secret}
}

// Issued returns the temporary keys issued so far, in order.
func (k *AWSKeys) Issued() []IssuedKey {
	k.mu.Lock()
	defer k.mu.Unlock()
	return slices.Clone(k.issued)
}

// Issue creates a temporary key valid for d, as STS's AssumeRole would
// for caller and role: for tests that need a key with a session token
// without calling STS.
func (k *AWSKeys) Issue(caller, role string, d time.Duration) (id, secret, token string) {
	id, secret, token, _ = k.issue("AssumeRole", caller, role, d, time.Now())
	return id, secret, token
}

// issue creates a temporary key for d.
func (k *AWSKeys) issue(action, caller, subject string, d time.Duration, now time.Time) (id, secret, token string, expires time.Time) {
	id = "ASIA" + randomID(16)
	secret, token = randomString(30), "FQoGZXIvYXdzE"+randomString(90)
	expires = now.Add(d).UTC().Truncate(time.Second)
	k.mu.Lock()
	defer k.mu.Unlock()
	k.keys[id] = awsKey{secret: secret, token: token, expires: expires}
	k.issued = append(k.issued, IssuedKey{AccessKey: id, Action: action, Caller: caller, Subject: subject, Expires: expires})
	return id, secret, token, expires
}

// authenticate checks r's SigV4 signature (bodyHash: the hex SHA-256 of
// its body) against the key it names. On failure it returns the code AWS
// answers with (InvalidAccessKeyId, SignatureDoesNotMatch, InvalidToken,
// ExpiredToken) and a reason that names no secret.
func (k *AWSKeys) authenticate(r *http.Request, bodyHash string, now time.Time) (sigV4Auth, string, error) {
	a, err := parseSigV4Auth(r.Header.Get("Authorization"))
	if err != nil {
		return a, "SignatureDoesNotMatch", fmt.Errorf("authorization header: %w", err)
	}
	k.mu.Lock()
	key, ok := k.keys[a.AccessKey]
	k.mu.Unlock()
	if !ok {
		return a, "InvalidAccessKeyId", fmt.Errorf("no such access key")
	}
	if a, err = verifySigV4(r, key.secret, bodyHash, now); err != nil {
		return a, "SignatureDoesNotMatch", err
	}
	got := r.Header.Get("X-Amz-Security-Token")
	switch {
	case key.token == "" && got != "":
		return a, "InvalidToken", fmt.Errorf("a session token with a long-term key")
	case key.token == "":
		return a, "", nil
	case got == "":
		return a, "InvalidToken", fmt.Errorf("a temporary key without its session token")
	case subtle.ConstantTimeCompare([]byte(got), []byte(key.token)) != 1:
		return a, "InvalidToken", fmt.Errorf("the session token is not the key's")
	case !slices.Contains(a.Signed, "x-amz-security-token"):
		return a, "InvalidToken", fmt.Errorf("the session token is not signed")
	case !now.Before(key.expires):
		return a, "ExpiredToken", fmt.Errorf("the temporary key expired at %s", key.expires.Format(time.RFC3339))
	}
	return a, "", nil
}

// temporary reports whether accessKey is a temporary key.
func (k *AWSKeys) temporary(accessKey string) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.keys[accessKey].token != ""
}

// randomID returns n characters of A-Z and 2-7 (base32) from crypto/rand,
// as in AWS's key ids.
func randomID(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(fmt.Sprintf("standin: crypto/rand: %v", err))
	}
	return base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(b)[:n]
}

// randomString returns n characters of URL-safe base64 from crypto/rand.
func randomString(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(fmt.Sprintf("standin: crypto/rand: %v", err))
	}
	return base64.RawURLEncoding.EncodeToString(b)[:n]
}

// Holds reports whether accessKey is one of k's keys with exactly secret
// and token (empty for a long-term key): whether the three were issued
// together.
func (k *AWSKeys) Holds(accessKey, secret, token string) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	key, ok := k.keys[accessKey]
	return ok && subtle.ConstantTimeCompare([]byte(key.secret), []byte(secret)) == 1 &&
		subtle.ConstantTimeCompare([]byte(key.token), []byte(token)) == 1
}

// Secrets returns the secret and session token of every key issued, and
// of every long-term key: what a canary check looks for.
func (k *AWSKeys) Secrets() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	var out []string
	for _, key := range k.keys {
		out = append(out, key.secret)
		if key.token != "" {
			out = append(out, key.token)
		}
	}
	return out
}
