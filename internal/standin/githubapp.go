package standin

import (
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"maps"
	"math/big"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// AppOptions describe a GitHub App installed on the stand-in.
type AppOptions struct {
	ID           int64  // the App's id: the JWT's iss
	Installation int64  // the installation's id
	Owner        string // the account it is installed on
	// Repos are the repositories (names under Owner) the installation
	// covers; Permissions what it may grant ("read" or "write").
	Repos       []string
	Permissions map[string]string
	// GrantExtra, when set, is added to every token's permissions: a
	// GitHub that grants more than asked (coily must refuse the token).
	GrantExtra map[string]string
}

// App is an App installed on the stand-in, with its private key as
// GitHub hands it out (PEM, PKCS #1).
type App struct {
	AppOptions
	Key *rsa.PrivateKey
	PEM []byte
}

// TokenRequest is one POST /app/installations/{id}/access_tokens the
// stand-in was sent, as it read it.
type TokenRequest struct {
	Installation int64
	Repositories []string // as asked (nil: none named, which GitHub reads as all)
	Permissions  map[string]string
	Issuer       string    // the JWT's iss
	IssuedAt     time.Time // its iat
	Expires      time.Time // its exp
	Received     time.Time
	Status       int    // the answer: 201, or the refusal's status
	Refusal      string // the refusal's message
	Token        string // the token minted (201)
}

// InstallationToken is a token the stand-in minted.
type InstallationToken struct {
	Value        string
	Installation int64
	Repo         string // "owner/name": the one repository it reaches
	Permissions  map[string]string
	Expires      time.Time
	Revoked      bool
}

// InstallApp installs an App on g with a fresh 2048-bit key.
func (g *GitHub) InstallApp(t testing.TB, opts AppOptions) *App {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatalf("standin: App key: %v", err)
	}
	a := &App{AppOptions: opts, Key: key,
		PEM: pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.apps == nil {
		g.apps, g.tokens = map[int64]*App{}, map[string]*InstallationToken{}
	}
	g.apps[opts.Installation] = a
	return a
}

// TokenRequests returns the token requests received so far.
func (g *GitHub) TokenRequests() []TokenRequest {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.asked)
}

// InstallationToken returns the stand-in's record of a token it minted.
func (g *GitHub) InstallationToken(value string) (InstallationToken, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	tok, ok := g.tokens[value]
	if !ok {
		return InstallationToken{}, false
	}
	return *tok, true
}

// mintToken answers POST /api/v3/app/installations/{id}/access_tokens as
// GitHub does: the JWT must be the App's (RS256 over its public key, iss
// its id, iat not ahead, exp ahead by at most 10 minutes); the token
// reaches the repositories named (all the installation covers when none
// is), with the permissions named (all the installation has when none
// is) plus metadata: read; asking for more than the installation has is
// refused (422).
func (g *GitHub) mintToken(w http.ResponseWriter, r *http.Request, line string) {
	now := time.Now()
	req := TokenRequest{Received: now}
	status, msg := g.tokenRequest(r, &req)
	if status == http.StatusCreated {
		tok := g.issue(req)
		req.Token = tok.Value
		writeJSON(w, status, tokenJSON(tok))
	} else {
		req.Refusal = msg
		writeJSON(w, status, map[string]string{"message": msg, "documentation_url": "https://docs.github.com/rest/apps/apps"})
	}
	req.Status = status
	g.mu.Lock()
	g.asked = append(g.asked, req)
	g.mu.Unlock()
	g.record(fmt.Sprintf("%d %s", status, line))
}

// tokenRequest reads and checks one token request into req; it returns
// the status to answer and, for a refusal, GitHub's message.
func (g *GitHub) tokenRequest(r *http.Request, req *TokenRequest) (int, string) {
	rest := strings.TrimPrefix(r.URL.Path, "/api/v3/app/installations/")
	idText, ok := strings.CutSuffix(rest, "/access_tokens")
	id, err := strconv.ParseInt(idText, 10, 64)
	if !ok || err != nil {
		return http.StatusNotFound, "Not Found"
	}
	req.Installation = id
	g.mu.Lock()
	app := g.apps[id]
	g.mu.Unlock()
	if app == nil {
		return http.StatusNotFound, "Not Found"
	}
	if status, msg := verifyAppJWT(r.Header.Get("Authorization"), app, req); status != 0 {
		return status, msg
	}
	var body struct {
		Repositories []string          `json:"repositories"`
		Permissions  map[string]string `json:"permissions"`
	}
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&body); err != nil && err != io.EOF {
		return http.StatusBadRequest, "Problems parsing JSON"
	}
	req.Repositories, req.Permissions = body.Repositories, body.Permissions
	for _, name := range body.Repositories {
		if !slices.Contains(app.Repos, name) {
			return http.StatusUnprocessableEntity, "There is at least one repository that does not exist or is not accessible to the parent installation."
		}
	}
	for k, v := range body.Permissions {
		if level[app.Permissions[k]] == 0 || level[v] == 0 || level[v] > level[app.Permissions[k]] {
			return http.StatusUnprocessableEntity, "The permissions requested are not granted to this installation."
		}
	}
	return http.StatusCreated, ""
}

var level = map[string]int{"read": 1, "write": 2}

// jwtClaims are the claims GitHub reads.
type jwtClaims struct {
	IAT json.Number `json:"iat"`
	EXP json.Number `json:"exp"`
	ISS json.Number `json:"iss"`
}

// verifyAppJWT checks the bearer JWT against the App: RS256, signed by
// its key, iss its id, iat not in the future, exp in the future and no
// more than 10 minutes ahead. It returns 0 when the JWT is good, else the
// status and GitHub's message.
func verifyAppJWT(auth string, app *App, req *TokenRequest) (int, string) {
	const undecodable = "A JSON web token could not be decoded"
	jwt, ok := strings.CutPrefix(auth, "Bearer ")
	parts := strings.Split(jwt, ".")
	if !ok || len(parts) != 3 {
		return http.StatusUnauthorized, undecodable
	}
	var header map[string]any
	if !decodeSegment(parts[0], &header) || header["alg"] != "RS256" {
		return http.StatusUnauthorized, undecodable
	}
	sig, err := base64.RawURLEncoding.DecodeString(parts[2])
	if err != nil {
		return http.StatusUnauthorized, undecodable
	}
	sum := sha256.Sum256([]byte(parts[0] + "." + parts[1]))
	if rsa.VerifyPKCS1v15(&app.Key.PublicKey, crypto.SHA256, sum[:], sig) != nil {
		return http.StatusUnauthorized, "A JSON web token could not be decoded (standin: the signature does not verify with the App's public key)"
	}
	var c jwtClaims
	if !decodeSegment(parts[1], &c) {
		return http.StatusUnauthorized, undecodable
	}
	iat, err1 := c.IAT.Int64()
	exp, err2 := c.EXP.Int64()
	if err1 != nil || err2 != nil {
		return http.StatusUnauthorized, undecodable
	}
	req.Issuer, req.IssuedAt, req.Expires = c.ISS.String(), time.Unix(iat, 0), time.Unix(exp, 0)
	now := time.Now()
	switch {
	case req.Issuer != strconv.FormatInt(app.ID, 10):
		return http.StatusUnauthorized, "'Issuer' claim ('iss') must be the App's id"
	case req.IssuedAt.After(now.Add(time.Second)):
		return http.StatusUnauthorized, "'Issued at' claim ('iat') must be an Integer representing a time in the past."
	case !req.Expires.After(now):
		return http.StatusUnauthorized, "'Expiration time' claim ('exp') must be a numeric value representing the future time at which the assertion expires."
	case req.Expires.After(now.Add(10*time.Minute + time.Second)):
		return http.StatusUnauthorized, "'Expiration time' claim ('exp') is too far in the future"
	}
	return 0, ""
}

func decodeSegment(seg string, v any) bool {
	raw, err := base64.RawURLEncoding.DecodeString(seg)
	if err != nil {
		return false
	}
	d := json.NewDecoder(strings.NewReader(string(raw)))
	d.UseNumber()
	return d.Decode(v) == nil
}

// issue mints a token for a checked request.
func (g *GitHub) issue(req TokenRequest) *InstallationToken {
	g.mu.Lock()
	defer g.mu.Unlock()
	app := g.apps[req.Installation]
	perms := maps.Clone(req.Permissions)
	if len(perms) == 0 {
		perms = maps.Clone(app.Permissions)
	}
	perms["metadata"] = "read"
	maps.Copy(perms, app.GrantExtra)
	repos := req.Repositories
	if len(repos) == 0 {
		repos = app.Repos
	}
	tok := &InstallationToken{Value: "ghs_" + randomAlnum(36), Installation: req.Installation, Permissions: perms,
		Expires: time.Now().Add(time.Hour).Truncate(time.Second)}
	if len(repos) == 1 {
		tok.Repo = app.Owner + "/" + repos[0]
	}
	g.tokens[tok.Value] = tok
	return tok
}

// tokenJSON is GitHub's answer for a minted token.
func tokenJSON(tok *InstallationToken) map[string]any {
	owner, name, _ := strings.Cut(tok.Repo, "/")
	var repos []any
	if tok.Repo != "" {
		repos = append(repos, map[string]any{"id": 1, "name": name, "full_name": tok.Repo, "owner": map[string]any{"login": owner}})
	}
	return map[string]any{"token": tok.Value, "expires_at": tok.Expires.UTC().Format(time.RFC3339),
		"permissions": tok.Permissions, "repository_selection": "selected", "repositories": repos}
}

// revokeToken answers DELETE /api/v3/installation/token: the token that
// authenticates the request ends.
func (g *GitHub) revokeToken(w http.ResponseWriter, line string, who *InstallationToken) {
	if who == nil {
		g.record("403 " + line)
		writeJSON(w, http.StatusForbidden, map[string]string{"message": "Only installation tokens can be revoked"})
		return
	}
	g.mu.Lock()
	who.Revoked = true
	g.mu.Unlock()
	g.record("204 " + line)
	w.WriteHeader(http.StatusNoContent)
}

// refuseFor is what GitHub answers an installation token's GraphQL
// request for anything beyond its repository and permissions: data and
// an error (NOT_FOUND for a repository it cannot see, FORBIDDEN for a
// mutation it may not make), or a nil error when it may.
func (g *GitHub) refuseFor(who *InstallationToken, req graphQLRequest, kind string) (map[string]any, map[string]any) {
	if who == nil {
		return nil, nil
	}
	g.mu.Lock()
	repo, perms := who.Repo, maps.Clone(who.Permissions)
	g.mu.Unlock()
	forbidden := map[string]any{"type": "FORBIDDEN", "message": "Resource not accessible by integration"}
	if kind == "mutation" && strings.Contains(req.Query, "createIssue") {
		input, _ := req.Variables["input"].(map[string]any)
		target, _ := strings.CutPrefix(stringVar(input, "repositoryId"), "R_")
		if !strings.EqualFold(target, repo) || perms["issues"] != "write" {
			return map[string]any{"createIssue": nil}, forbidden
		}
		return nil, nil
	}
	if owner := stringVar(req.Variables, "owner"); owner != "" {
		target := owner + "/" + stringVar(req.Variables, "name", "repo")
		if !strings.EqualFold(target, repo) {
			return map[string]any{"repository": nil}, map[string]any{"type": "NOT_FOUND",
				"message": fmt.Sprintf("Could not resolve to a Repository with the name '%s'.", target)}
		}
		if strings.Contains(req.Query, "issue") && level[perms["issues"]] == 0 {
			return map[string]any{"repository": nil}, forbidden
		}
	}
	return nil, nil
}

// randomAlnum returns n random letters and digits.
func randomAlnum(n int) string {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, n)
	for i := range b {
		k, err := rand.Int(rand.Reader, big.NewInt(int64(len(alphabet))))
		if err != nil {
			panic(fmt.Sprintf("standin: crypto/rand: %v", err))
		}
		b[i] = alphabet[k.Int64()]
	}
	return string(b)
}
