package ghapp

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// tokenAnswer is GitHub's answer to a token request (201), the parts that
// are checked.
type tokenAnswer struct {
	Token               string      `json:"token"`
	ExpiresAt           time.Time   `json:"expires_at"`
	Permissions         Permissions `json:"permissions"`
	RepositorySelection string      `json:"repository_selection"`
	Repositories        []struct {
		FullName string `json:"full_name"`
	} `json:"repositories"`
}

// checkToken reads GitHub's answer to req and checks that the token is
// what was asked for: well formed, for req.Repository alone, with no
// permission beyond req.Permissions (but metadata: read), expiring after
// now and within MaxTokenLife (with some clock skew). On a failed check
// the returned Token still carries the value when there is one, so that
// the caller can revoke it; its error never holds the value.
func checkToken(data []byte, req Request, now time.Time) (Token, error) {
	var a tokenAnswer
	if err := json.Unmarshal(data, &a); err != nil {
		// The rest may be malformed around a token that was minted all
		// the same: it is returned, to be revoked.
		if v := mintedValue(data); v != "" {
			return Token{Value: v, Repository: req.Repository}, fmt.Errorf("%w: the answer is malformed JSON around a token; it was revoked", ErrBadToken)
		}
		return Token{}, fmt.Errorf("%w: the answer is not a token (malformed JSON)", ErrBadToken)
	}
	if !validToken(a.Token) {
		return Token{}, fmt.Errorf("%w: the answer holds no well-formed token", ErrBadToken)
	}
	tok := Token{Value: a.Token, ExpiresAt: a.ExpiresAt, Repository: req.Repository, Permissions: a.Permissions}
	if err := checkAnswer(a, req, now); err != nil {
		return tok, fmt.Errorf("%w: %v; it was revoked", ErrBadToken, err)
	}
	return tok, nil
}

// mintedValue is the well-formed token of an answer, read alone (the
// rest of the answer may not decode), or "".
func mintedValue(data []byte) string {
	var t struct {
		Token string `json:"token"`
	}
	if json.Unmarshal(data, &t) != nil || !validToken(t.Token) {
		return ""
	}
	return t.Token
}

// checkAnswer checks everything but the token's form.
func checkAnswer(a tokenAnswer, req Request, now time.Time) error {
	switch {
	case a.ExpiresAt.IsZero():
		return errors.New("no expiry")
	case !a.ExpiresAt.After(now):
		return fmt.Errorf("it expired at %s", a.ExpiresAt.UTC().Format(time.RFC3339))
	case a.ExpiresAt.After(now.Add(MaxTokenLife + clockSkew)):
		return fmt.Errorf("it lives until %s, longer than %s", a.ExpiresAt.UTC().Format(time.RFC3339), MaxTokenLife)
	case a.RepositorySelection != "selected":
		return fmt.Errorf("it is for %s repositories, not the one asked for", quoteShort(a.RepositorySelection))
	case len(a.Repositories) != 1:
		return fmt.Errorf("it is for %d repositories, not the one asked for", len(a.Repositories))
	}
	got, err := ParseRepository(a.Repositories[0].FullName, "")
	if err != nil || !got.Equal(req.Repository) {
		return fmt.Errorf("it is for repository %s, not %s", quoteShort(a.Repositories[0].FullName), req.Repository)
	}
	if more := beyond(a.Permissions, req.Permissions); len(more) > 0 {
		return fmt.Errorf("it carries permissions not asked for (%s)", quoteShort(strings.Join(more, ",")))
	}
	return nil
}

// validToken: 1 to maxToken characters of [A-Za-z0-9_.-].
func validToken(s string) bool {
	if s == "" || len(s) > maxToken {
		return false
	}
	for _, c := range []byte(s) {
		if !alnum(c) && c != '_' && c != '.' && c != '-' {
			return false
		}
	}
	return true
}

// quoteShort quotes s, cut to 64 bytes.
func quoteShort(s string) string {
	if len(s) > 64 {
		s = s[:64] + "…"
	}
	return fmt.Sprintf("%q", s)
}
