package ghapp

import (
	"bytes"
	"context"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode"
)

// Bounds of one exchange with the API.
const (
	// DefaultTimeout bounds each request (minting, revoking).
	DefaultTimeout = 10 * time.Second
	// maxBody bounds an answer read.
	maxBody = 1 << 20
	// MaxTokenLife is the longest a token may live: GitHub's tokens
	// expire after an hour; an answer promising longer is refused.
	MaxTokenLife = time.Hour
	// clockSkew is allowed between this host's clock and GitHub's.
	clockSkew = 5 * time.Minute
	// maxToken bounds a token's length (GitHub's stateless tokens are
	// JWT-like, longer than the classic 40 characters).
	maxToken = 4096
	// maxMessage bounds the part of GitHub's error message quoted.
	maxMessage = 200
)

// Errors the client's failures wrap.
var (
	// ErrRefused: the API refused to mint (a wrong key or App id, an
	// installation that does not cover the repository or permissions).
	ErrRefused = errors.New("GitHub refused the token")
	// ErrUnreachable: no answer within the timeout, or a transport error.
	ErrUnreachable = errors.New("GitHub API unreachable")
	// ErrBadToken: the answer's token is not the one asked for (another
	// repository, more permissions, a longer life, malformed); it was
	// revoked.
	ErrBadToken = errors.New("GitHub's token is not the one asked for")
)

// Client talks to one GitHub API.
type Client struct {
	// API is the API's base URL (ParseAPIURL).
	API *url.URL
	// HTTP is the client requests go through; nil means one with
	// DefaultTimeout that follows no redirect.
	HTTP *http.Client
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Request is what to mint: a token of installation Installation of App
// AppID (its id, or client id), for Repository alone with Permissions.
type Request struct {
	AppID        string
	Installation int64
	Key          *rsa.PrivateKey
	Repository   Repository
	Permissions  Permissions
}

// Token is a minted installation token. Nothing that renders it shows
// Value: not String, GoString or fmt's %v, %+v and %#v, not LogValue
// (slog), not encoding/json.
type Token struct {
	Value       string `json:"-"`
	ExpiresAt   time.Time
	Repository  Repository
	Permissions Permissions // as granted
}

// String describes the token without its value.
func (t Token) String() string {
	return fmt.Sprintf("installation token for %s (%s), expires %s", t.Repository, t.Permissions, t.ExpiresAt.UTC().Format(time.RFC3339))
}

// GoString describes the token without its value.
func (t Token) GoString() string { return t.String() }

// Format writes String for every verb: %v, %+v, %#v, %s and %q alike
// (fmt would otherwise print the fields, Value among them, for %x or %d).
func (t Token) Format(f fmt.State, verb rune) {
	if verb == 'q' {
		fmt.Fprintf(f, "%q", t.String())
		return
	}
	_, _ = io.WriteString(f, t.String())
}

// LogValue is what slog logs of the token: its repository, permissions
// and expiry, never its value.
func (t Token) LogValue() slog.Value {
	return slog.GroupValue(slog.String("repository", t.Repository.String()),
		slog.String("permissions", t.Permissions.String()), slog.Time("expires_at", t.ExpiresAt))
}

// NewHTTPClient returns the client Mint and Revoke use when Client.HTTP is
// nil: DefaultTimeout, no redirects, the given transport (nil: the
// default).
func NewHTTPClient(rt http.RoundTripper) *http.Client {
	return &http.Client{
		Transport: rt,
		Timeout:   DefaultTimeout,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return errors.New("redirect refused: the App's credentials go to the configured API only")
		},
	}
}

func (c *Client) http() *http.Client {
	if c.HTTP != nil {
		return c.HTTP
	}
	return NewHTTPClient(nil)
}

func (c *Client) now() time.Time {
	if c.Now != nil {
		return c.Now()
	}
	return time.Now()
}

// tokenRequest is the body of POST /app/installations/{id}/access_tokens.
type tokenRequest struct {
	Repositories []string    `json:"repositories"`
	Permissions  Permissions `json:"permissions"`
}

// Mint asks for an installation token of req.Repository alone with
// req.Permissions, and checks the answer (checkToken). A token that fails
// the check is revoked before Mint returns.
func (c *Client) Mint(ctx context.Context, req Request) (Token, error) {
	if len(req.Permissions) == 0 {
		return Token{}, errors.New("no permissions asked for")
	}
	if req.Installation <= 0 {
		return Token{}, errors.New("no installation id")
	}
	jwt, err := AppJWT(req.Key, req.AppID, c.now())
	if err != nil {
		return Token{}, err
	}
	body, _ := json.Marshal(tokenRequest{Repositories: []string{req.Repository.Name}, Permissions: req.Permissions})
	u := c.API.JoinPath("app", "installations", strconv.FormatInt(req.Installation, 10), "access_tokens")
	status, data, err := c.do(ctx, http.MethodPost, u.String(), "Bearer "+jwt, body)
	if err != nil {
		return Token{}, err
	}
	if status != http.StatusCreated {
		err := fmt.Errorf("%w: %d %s", ErrRefused, status, apiMessage(data, jwt))
		if status/100 == 2 { // a success of another kind may still carry a token
			err = c.revokeAfter(ctx, mintedValue(data), err)
		}
		return Token{}, err
	}
	tok, err := checkToken(data, req, c.now())
	if err != nil {
		return Token{}, c.revokeAfter(ctx, tok.Value, err)
	}
	return tok, nil
}

// revokeAfter revokes value, a token minted but refused for err, and
// returns err, saying so when revoking failed. An empty value is no
// token: err alone. The revocation runs even when ctx is done.
func (c *Client) revokeAfter(ctx context.Context, value string, err error) error {
	if value == "" {
		return err
	}
	if rerr := c.Revoke(context.WithoutCancel(ctx), value); rerr != nil {
		return fmt.Errorf("%w (and revoking it failed: %v)", err, rerr)
	}
	return err
}

// Revoke ends a token (DELETE /installation/token, authenticated by the
// token itself). A token GitHub no longer accepts (401: revoked or
// expired) counts as revoked.
func (c *Client) Revoke(ctx context.Context, token string) error {
	status, data, err := c.do(ctx, http.MethodDelete, c.API.JoinPath("installation", "token").String(), "Bearer "+token, nil)
	switch {
	case err != nil:
		return err
	case status == http.StatusNoContent || status == http.StatusUnauthorized:
		return nil
	}
	return fmt.Errorf("revoke: GitHub answered %d %s", status, apiMessage(data, token))
}

// do sends one request, bounded by DefaultTimeout, and reads at most
// maxBody of the answer. Its errors never hold auth.
func (c *Client) do(ctx context.Context, method, u, auth string, body []byte) (int, []byte, error) {
	ctx, cancel := context.WithTimeout(ctx, DefaultTimeout)
	defer cancel()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return 0, nil, fmt.Errorf("%w: %s %s: a bad request", ErrUnreachable, method, redactURL(u))
	}
	req.Header.Set("Authorization", auth)
	req.Header.Set("Accept", "application/vnd.github+json")
	req.Header.Set("X-GitHub-Api-Version", "2022-11-28")
	req.Header.Set("User-Agent", "coily")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http().Do(req)
	if err != nil {
		return 0, nil, fmt.Errorf("%w: %s %s: %s", ErrUnreachable, method, redactURL(u), transportCause(err))
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxBody+1))
	if err != nil {
		return 0, nil, fmt.Errorf("%w: %s %s: reading the answer: %s", ErrUnreachable, method, redactURL(u), transportCause(err))
	}
	if len(data) > maxBody {
		return 0, nil, fmt.Errorf("%w: %s %s: an answer larger than %d bytes", ErrUnreachable, method, redactURL(u), maxBody)
	}
	return resp.StatusCode, data, nil
}

// transportCause says what went wrong without quoting the request.
func transportCause(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Sprintf("no answer within %s", DefaultTimeout)
	}
	return err.Error()
}

func redactURL(u string) string {
	if p, err := url.Parse(u); err == nil {
		return p.Redacted()
	}
	return "(the API)"
}

// apiMessage is the "message" of GitHub's JSON error, cut short, in
// printable characters, and without secret (the JWT or token sent,
// should a hostile server echo it).
func apiMessage(data []byte, secret string) string {
	var e struct {
		Message string `json:"message"`
	}
	if json.Unmarshal(data, &e) != nil || e.Message == "" {
		return "(no message)"
	}
	m := e.Message
	for _, s := range append(strings.Split(secret, "."), secret) {
		if len(s) >= 8 {
			m = strings.ReplaceAll(m, s, "[REDACTED]")
		}
	}
	m = strings.Map(func(r rune) rune {
		if unicode.IsPrint(r) {
			return r
		}
		return ' '
	}, m)
	if r := []rune(m); len(r) > maxMessage {
		m = string(r[:maxMessage]) + "…"
	}
	return strconv.Quote(m)
}
