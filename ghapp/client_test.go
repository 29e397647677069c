package ghapp

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeAPI answers token requests with answer and records what it was
// asked. A unit seam: the real exchange runs against the stand-in in
// internal/standin and end to end in cmd/coily.
type fakeAPI struct {
	mu      sync.Mutex
	asked   []tokenRequest
	auth    []string
	revoked []string
	status  int
	body    func(jwt string) []byte
	revoke  int
}

func (f *fakeAPI) start(t *testing.T) *Client {
	t.Helper()
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		auth := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		switch {
		case r.Method == http.MethodPost && r.URL.Path == "/api/v3/app/installations/2/access_tokens":
			var req tokenRequest
			data, _ := io.ReadAll(r.Body)
			if err := json.Unmarshal(data, &req); err != nil {
				t.Errorf("token request body %q: %v", data, err)
			}
			f.asked, f.auth = append(f.asked, req), append(f.auth, auth)
			w.WriteHeader(f.status)
			_, _ = w.Write(f.body(auth))
		case r.Method == http.MethodDelete && r.URL.Path == "/api/v3/installation/token":
			f.revoked = append(f.revoked, auth)
			w.WriteHeader(f.revoke)
		default:
			t.Errorf("unexpected %s %s", r.Method, r.URL.Path)
			w.WriteHeader(http.StatusNotFound)
		}
	}))
	t.Cleanup(srv.Close)
	u, _ := url.Parse(srv.URL + "/api/v3")
	return &Client{API: u, HTTP: srv.Client(), Now: func() time.Time { return answerNow }}
}

func mintReq(t *testing.T) Request {
	r := answerReq()
	r.Key = rsaKey(t)
	return r
}

func TestMint(t *testing.T) {
	f := &fakeAPI{status: http.StatusCreated, revoke: http.StatusNoContent, body: func(string) []byte { return answer(nil) }}
	c := f.start(t)
	tok, err := c.Mint(context.Background(), mintReq(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(f.asked) != 1 || len(f.asked[0].Repositories) != 1 || f.asked[0].Repositories[0] != "repo" || f.asked[0].Permissions.String() != "issues:write" {
		t.Fatalf("asked for %+v, want repository repo alone with issues:write", f.asked)
	}
	_, claims := verifyJWT(t, f.auth[0], &rsaKey(t).PublicKey)
	if claims["iss"] != json.Number("1") {
		t.Errorf("claims %v", claims)
	}
	if err := c.Revoke(context.Background(), tok.Value); err != nil || len(f.revoked) != 1 || f.revoked[0] != tok.Value {
		t.Fatalf("Revoke: %v, revoked %q", err, f.revoked)
	}
}

// A token wider than asked is revoked at once and refused.
func TestMintRevokesWiderToken(t *testing.T) {
	f := &fakeAPI{status: http.StatusCreated, revoke: http.StatusNoContent, body: func(string) []byte {
		return answer(func(m map[string]any) { m["permissions"] = map[string]any{"issues": "write", "contents": "write"} })
	}}
	_, err := f.start(t).Mint(context.Background(), mintReq(t))
	if !errors.Is(err, ErrBadToken) || !strings.Contains(err.Error(), "contents:write") {
		t.Fatalf("Mint = %v", err)
	}
	if len(f.revoked) != 1 {
		t.Fatalf("revoked %d tokens, want the wider one", len(f.revoked))
	}
	f.revoke = http.StatusInternalServerError
	f.revoked = nil
	_, err = f.start(t).Mint(context.Background(), mintReq(t))
	if !errors.Is(err, ErrBadToken) || !strings.Contains(err.Error(), "revoking it failed") {
		t.Fatalf("Mint with a failed revocation = %v", err)
	}
}

// A refusal quotes GitHub's message, never the JWT (should the server
// echo it), cut short and printable.
func TestMintRefused(t *testing.T) {
	f := &fakeAPI{status: http.StatusUnprocessableEntity, body: func(jwt string) []byte {
		msg, _ := json.Marshal(map[string]string{"message": "no \x1b[31m " + jwt + " " + strings.Split(jwt, ".")[2] + strings.Repeat("x", 500)})
		return msg
	}}
	c := f.start(t)
	_, err := c.Mint(context.Background(), mintReq(t))
	if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "422") {
		t.Fatalf("Mint = %v", err)
	}
	jwt := f.auth[0]
	for _, part := range append(strings.Split(jwt, ".")[1:], jwt) {
		if strings.Contains(err.Error(), part) {
			t.Fatalf("the error holds the JWT: %v", err)
		}
	}
	if strings.Contains(err.Error(), "\x1b") || len(err.Error()) > 400 {
		t.Fatalf("the error is not cut and cleaned: %q", err)
	}
	f.body = func(string) []byte { return []byte("<html>") }
	if _, err := c.Mint(context.Background(), mintReq(t)); !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "(no message)") {
		t.Fatalf("Mint = %v", err)
	}
}

// A redirect is not followed: the JWT goes to the configured API alone.
func TestMintNoRedirect(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/elsewhere" {
			t.Errorf("the redirect was followed (Authorization set: %v)", r.Header.Get("Authorization") != "")
		}
		http.Redirect(w, r, "/elsewhere", http.StatusTemporaryRedirect)
	}))
	defer srv.Close()
	u, _ := url.Parse(srv.URL)
	hc := NewHTTPClient(srv.Client().Transport)
	_, err := (&Client{API: u, HTTP: hc}).Mint(context.Background(), mintReq(t))
	if !errors.Is(err, ErrUnreachable) || !strings.Contains(err.Error(), "redirect refused") {
		t.Fatalf("Mint = %v", err)
	}
}

// An API that does not answer fails the request within the context's
// deadline (DefaultTimeout at most).
func TestMintTimeout(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-release }))
	defer srv.Close()
	defer close(release)
	u, _ := url.Parse(srv.URL)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := (&Client{API: u, HTTP: srv.Client()}).Mint(ctx, mintReq(t))
	if !errors.Is(err, ErrUnreachable) || time.Since(start) > 5*time.Second {
		t.Fatalf("Mint = %v after %s", err, time.Since(start))
	}
}

func TestMintNeedsPermissionsAndInstallation(t *testing.T) {
	c := &Client{API: &url.URL{Scheme: "https", Host: "127.0.0.1:1"}}
	r := mintReq(t)
	r.Permissions = nil
	if _, err := c.Mint(context.Background(), r); err == nil {
		t.Error("minted without permissions")
	}
	r = mintReq(t)
	r.Installation = 0
	if _, err := c.Mint(context.Background(), r); err == nil {
		t.Error("minted without an installation")
	}
}

func TestRevokeAnswers(t *testing.T) {
	for status, ok := range map[int]bool{http.StatusNoContent: true, http.StatusUnauthorized: true, http.StatusForbidden: false, http.StatusInternalServerError: false} {
		f := &fakeAPI{revoke: status}
		err := f.start(t).Revoke(context.Background(), "ghs_secretvalue123")
		if (err == nil) != ok || err != nil && strings.Contains(err.Error(), "ghs_secretvalue123") {
			t.Errorf("status %d: %v", status, err)
		}
	}
}

// A token minted but refused, for an answer that does not decode around
// it or fails a check after it, is revoked with itself before Mint
// returns; an answer with no token revokes nothing.
func TestMintRevokesRefusedToken(t *testing.T) {
	const val = "ghs_16C7e42F292c6912E7710c838347Ae178B4a"
	for name, tc := range map[string]struct {
		status int
		body   []byte
		revoke bool
	}{
		"bad expiry":         {body: answer(func(m map[string]any) { m["expires_at"] = "tomorrow" }), revoke: true},
		"permissions a list": {body: answer(func(m map[string]any) { m["permissions"] = []any{"issues"} }), revoke: true},
		"repositories a map": {body: answer(func(m map[string]any) { m["repositories"] = map[string]any{"full_name": "alice/repo"} }), revoke: true},
		"another repository": {body: answer(func(m map[string]any) { m["repositories"] = []any{map[string]any{"full_name": "alice/other"}} }), revoke: true},
		"more permissions":   {body: answer(func(m map[string]any) { m["permissions"] = map[string]any{"issues": "write", "contents": "write"} }), revoke: true},
		"expired":            {body: answer(func(m map[string]any) { m["expires_at"] = answerNow.Add(-time.Second).Format(time.RFC3339) }), revoke: true},
		"200, not 201":       {status: http.StatusOK, body: answer(nil), revoke: true},
		"not json":           {body: []byte("<html>")},
		"truncated":          {body: answer(nil)[:40]},
		"bad token":          {body: answer(func(m map[string]any) { m["token"] = "ghs_a\nX-Evil: 1" })},
		"refused":            {status: http.StatusForbidden, body: []byte(`{"message":"no","token":"` + val + `"}`)},
	} {
		t.Run(name, func(t *testing.T) {
			status := tc.status
			if status == 0 {
				status = http.StatusCreated
			}
			f := &fakeAPI{status: status, revoke: http.StatusNoContent, body: func(string) []byte { return tc.body }}
			_, err := f.start(t).Mint(context.Background(), mintReq(t))
			if err == nil || strings.Contains(err.Error(), val) {
				t.Fatalf("Mint = %v", err)
			}
			f.mu.Lock()
			defer f.mu.Unlock()
			if want := map[bool]int{true: 1, false: 0}[tc.revoke]; len(f.revoked) != want || want == 1 && f.revoked[0] != val {
				t.Fatalf("revoked %q, want %d revocation of the minted token (%v)", f.revoked, want, err)
			}
		})
	}
}
