// Package githubapp is the attachment of a rule's github_app: for each
// exec it mints an installation token of a GitHub App (package ghapp),
// scoped to the one repository the decision took and to the rule's
// permissions, puts it into the child's environment under the rule's
// variables, and revokes it when the command is over. The App's private
// key is fetched with the rule's credentials and signs the App's JWT in
// the server only; it never reaches the child. The package reads the
// rule's section too (section.go: its schema, and the repository its
// flags name), which the policy asks whether a command's arguments can
// match the rule at all.
package githubapp

import (
	"context"
	"crypto/rsa"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"coily.dev/coily/attach"
	"coily.dev/coily/attach/cabundle"
	"coily.dev/coily/audit"
	"coily.dev/coily/ghapp"
	"coily.dev/coily/keystore"
	"coily.dev/coily/policy"
	"coily.dev/coily/refusal"
	"coily.dev/coily/scrub"
)

// KeyVar is the name a rule's GitHub App private key is fetched under:
// never an environment variable of the child (policy reserves
// COILY_GITHUB_*), only a label of its redaction.
const KeyVar = "COILY_GITHUB_APP_KEY"

// Token is the installation token of one rule's github_app, for one
// execution.
type Token struct {
	rule *policy.Rule
	app  *GitHubApp
	// repo is the repository the token is for (the decision's).
	repo ghapp.Repository
	log  *slog.Logger
	// client and token are the token minted, and what it takes to
	// revoke it; done says it was revoked (or tried).
	client *ghapp.Client
	token  ghapp.Token
	done   bool
}

// New is the attachment of r's github_app, for the arguments the rule
// matched (the decision's); nil when it has none. The token's repository
// is the one they name (Repository). log says what
// happens to the token.
func New(r *policy.Rule, args []string, log *slog.Logger) *Token {
	g := Of(r)
	if g == nil {
		return nil
	}
	repo, _ := Repository(r, args)
	return &Token{rule: r, app: g, repo: repo, log: log}
}

var _ attach.Credentialed = (*Token)(nil)

// Refs are the App's private key, under KeyVar.
func (t *Token) Refs() map[string]keystore.Ref {
	return map[string]keystore.Ref{KeyVar: t.app.PrivateKey}
}

// Take takes the App's private key out of vals and mints the token with
// it, which goes into vals under each of the rule's variables. A value
// that is no usable key, or any failure to mint, refuses the exec with
// credential-unavailable, naming the reference or the cause (never a
// value); the key is returned all the same, to be redacted.
func (t *Token) Take(ctx context.Context, vals map[string]string) ([]scrub.Secret, error) {
	var taken []scrub.Secret
	v, ok := vals[KeyVar]
	if ok {
		taken = append(taken, scrub.Secret{Name: KeyVar, Value: v})
	}
	delete(vals, KeyVar)
	key, err := ghapp.ParsePrivateKey(v)
	if err != nil {
		err = fmt.Errorf("credential %s: not usable as a GitHub App private key: %v", t.app.PrivateKey, err)
		return taken, refusal.Wrap(refusal.CredentialUnavailable, err, "%v", err)
	}
	return taken, t.mint(ctx, key, vals)
}

// mint mints the execution's installation token: of the repository the
// decision took alone, with the rule's permissions. The token goes into
// vals under each of the rule's variables.
func (t *Token) mint(ctx context.Context, key *rsa.PrivateKey, vals map[string]string) error {
	r, g := t.rule, t.app
	if t.repo == (ghapp.Repository{}) {
		return refusal.New(refusal.Internal, "rule %q: no repository for its github_app token", r.Name)
	}
	rt, err := transport(r)
	if err != nil {
		err = fmt.Errorf("github_app of rule %q: ca_file %s: %v", r.Name, r.CAFile, err)
		return refusal.Wrap(refusal.CredentialUnavailable, err, "%v", err)
	}
	c := &ghapp.Client{API: g.API, HTTP: ghapp.NewHTTPClient(rt)}
	tok, err := c.Mint(ctx, ghapp.Request{AppID: g.AppID, Installation: g.InstallationID, Key: key,
		Repository: t.repo, Permissions: g.Permissions})
	if err != nil {
		rt.CloseIdleConnections()
		err = fmt.Errorf("github_app installation token for %s (App %s, installation %d): %w", t.repo, g.AppID, g.InstallationID, err)
		return refusal.Wrap(refusal.CredentialUnavailable, err, "%v", err)
	}
	t.client, t.token = c, tok
	for _, name := range g.Env {
		vals[name] = tok.Value
	}
	t.log.Info("github app token minted", "repository", tok.Repository.String(),
		"permissions", tok.Permissions.String(), "expires", tok.ExpiresAt.UTC().Format(time.RFC3339))
	return nil
}

// Prepare has nothing to ready: the token reaches the child with the
// fetched values.
func (t *Token) Prepare(context.Context, *attach.Run) error { return nil }

// Close revokes the token (its command is over, or will never run),
// once. The outcome goes into the end's record, when there is one; a
// token that cannot be revoked ends at its expiry.
func (t *Token) Close(ctx context.Context, end *attach.End) {
	if t.client == nil || t.done {
		return
	}
	t.done = true
	err := t.client.Revoke(context.WithoutCancel(ctx), t.token.Value)
	if tr, ok := t.client.HTTP.Transport.(*http.Transport); ok {
		tr.CloseIdleConnections()
	}
	if err != nil {
		t.log.Error("github app token revocation failed; it ends at its expiry",
			"expires", t.token.ExpiresAt.UTC().Format(time.RFC3339), "err", err)
	}
	if end.Record == nil {
		return
	}
	if end.Result {
		end.Record.UseCredential(fmt.Sprintf("github_app installation token for %s (%s) as %s", t.token.Repository, t.token.Permissions, strings.Join(t.app.Env, ", ")))
	}
	if err != nil {
		end.Record.SetDetail("github_app_revoke_failed", err.Error())
	} else {
		end.Record.SetDetail("github_app_revoked", "true")
	}
}

// Describe writes the App, installation and key reference, the
// repository and permissions asked for and, once minted, the token's
// expiry and granted permissions. Never the token.
func (t *Token) Describe(rec *audit.Record) {
	g := t.app
	rec.SetDetail("github_app", fmt.Sprintf("app %s installation %d key %s api %s", g.AppID, g.InstallationID, g.PrivateKey, g.API))
	if t.repo != (ghapp.Repository{}) {
		rec.SetDetail("github_app_repository", t.repo.String())
	}
	rec.SetDetail("github_app_permissions", g.Permissions.String())
	if t.client != nil {
		rec.SetDetail("github_app_token_expires", t.token.ExpiresAt.UTC().Format(time.RFC3339))
		rec.SetDetail("github_app_token_permissions", t.token.Permissions.String())
	}
}

// transport is how the server reaches the rule's GitHub API: at the
// addresses the rule's egress.hosts pins for the API's host, if it pins
// any (what the command reaches under that name), else through DNS; with
// the system's trust roots, or the rule's ca_file instead (the bundle the
// command trusts for the same host).
func transport(r *policy.Rule) (*http.Transport, error) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if r.Egress != nil {
		if pinned := r.Egress.Hosts[Of(r).API.Hostname()]; len(pinned) > 0 {
			tr.Proxy = nil // the pinned address, not a proxy's view of the name
			tr.DialContext = dialPinned(pinned)
		}
	}
	if r.CAFile == "" {
		return tr, nil
	}
	pool, err := cabundle.Pool(r.CAFile) // what the command trusts, checked the same way
	if err != nil {
		return nil, err
	}
	tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	return tr, nil
}

// dialPinned dials the first of addrs that answers, on the port asked
// for, whatever the name.
func dialPinned(addrs []netip.Addr) func(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		_, port, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, err
		}
		var last error
		for _, a := range addrs {
			c, err := d.DialContext(ctx, network, net.JoinHostPort(a.String(), port))
			if err == nil {
				return c, nil
			}
			last = err
		}
		return nil, last
	}
}
