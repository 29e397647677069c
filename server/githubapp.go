package server

import (
	"context"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"time"

	"coily.dev/coily/attach/cabundle"
	"coily.dev/coily/audit"
	"coily.dev/coily/ghapp"
	"coily.dev/coily/policy"
	"coily.dev/coily/refusal"
)

// githubAppKeyVar is the name the server fetches a rule's GitHub App
// private key under: never an environment variable of the child (policy
// reserves COILY_GITHUB_*), only a label of its redaction.
const githubAppKeyVar = "COILY_GITHUB_APP_KEY"

// githubAppToken is the installation token minted for one execution, and
// what it takes to revoke it.
type githubAppToken struct {
	client *ghapp.Client
	token  ghapp.Token
	done   bool // revoked (or tried)
}

// takeGitHubAppKey parses the fetched private key of the rule's
// github_app and takes it out of vals (which become the child's
// environment): it signs the App's JWT in the server only. A value that
// is no usable key refuses the exec with credential-unavailable, naming
// the reference.
func takeGitHubAppKey(r *policy.Rule, vals map[string]string) (*rsa.PrivateKey, error) {
	if r.GitHubApp == nil {
		return nil, nil
	}
	key, err := ghapp.ParsePrivateKey(vals[githubAppKeyVar])
	delete(vals, githubAppKeyVar)
	if err != nil {
		err = fmt.Errorf("credential %s: not usable as a GitHub App private key: %v", r.GitHubApp.PrivateKey, err)
		return nil, refusal.Wrap(refusal.CredentialUnavailable, err, "%v", err)
	}
	return key, nil
}

// mintGitHubToken mints the execution's installation token: of the
// repository the decision took (x.ghRepo) alone, with the rule's
// permissions. Any failure refuses the exec with credential-unavailable
// and the cause (never a value). The token goes into vals under each of
// the rule's variables.
func (s *Server) mintGitHubToken(ctx context.Context, x *execution, key *rsa.PrivateKey, vals map[string]string) error {
	g := x.rule.GitHubApp
	if g == nil {
		return nil
	}
	if x.ghRepo == (ghapp.Repository{}) {
		return refusal.New(refusal.Internal, "rule %q: no repository for its github_app token", x.rule.Name)
	}
	rt, err := githubTransport(x.rule)
	if err != nil {
		err = fmt.Errorf("github_app of rule %q: ca_file %s: %v", x.rule.Name, x.rule.CAFile, err)
		return refusal.Wrap(refusal.CredentialUnavailable, err, "%v", err)
	}
	c := &ghapp.Client{API: g.API, HTTP: ghapp.NewHTTPClient(rt)}
	tok, err := c.Mint(ctx, ghapp.Request{AppID: g.AppID, Installation: g.InstallationID, Key: key,
		Repository: x.ghRepo, Permissions: g.Permissions})
	if err != nil {
		rt.CloseIdleConnections()
		err = fmt.Errorf("github_app installation token for %s (App %s, installation %d): %w", x.ghRepo, g.AppID, g.InstallationID, err)
		return refusal.Wrap(refusal.CredentialUnavailable, err, "%v", err)
	}
	x.ghToken = &githubAppToken{client: c, token: tok}
	for _, name := range g.Env {
		vals[name] = tok.Value
	}
	s.log.Info("github app token minted", "request_id", x.id, "repository", tok.Repository.String(),
		"permissions", tok.Permissions.String(), "expires", tok.ExpiresAt.UTC().Format(time.RFC3339))
	return nil
}

// githubTransport is how the server reaches the rule's GitHub API: at the
// addresses the rule's egress.hosts pins for the API's host, if it pins
// any (what the command reaches under that name), else through DNS; with
// the system's trust roots, or the rule's ca_file instead (the bundle the
// command trusts for the same host).
func githubTransport(r *policy.Rule) (*http.Transport, error) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if r.Egress != nil {
		if pinned := r.Egress.Hosts[r.GitHubApp.API.Hostname()]; len(pinned) > 0 {
			tr.Proxy = nil // the pinned address, not a proxy's view of the name
			tr.DialContext = dialPinned(pinned)
		}
	}
	if r.CAFile == "" {
		return tr, nil
	}
	data, err := cabundle.Read(r.CAFile) // what the command trusts, checked the same way
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data) {
		return nil, errors.New("holds no usable certificate")
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

// endGitHubToken revokes the execution's installation token (its command
// is over, or will never run), once. The outcome goes into rec, when
// given; a token that cannot be revoked ends at its expiry.
func (s *Server) endGitHubToken(ctx context.Context, x *execution, rec *audit.Record) {
	t := x.ghToken
	if t == nil || t.done {
		return
	}
	t.done = true
	err := t.client.Revoke(context.WithoutCancel(ctx), t.token.Value)
	if tr, ok := t.client.HTTP.Transport.(*http.Transport); ok {
		tr.CloseIdleConnections()
	}
	if err != nil {
		s.log.Error("github app token revocation failed; it ends at its expiry", "request_id", x.id,
			"expires", t.token.ExpiresAt.UTC().Format(time.RFC3339), "err", err)
	}
	if rec == nil {
		return
	}
	if rec.Details == nil {
		rec.Details = map[string]string{}
	}
	if err != nil {
		rec.Details["github_app_revoke_failed"] = err.Error()
	} else {
		rec.Details["github_app_revoked"] = "true"
	}
}

// githubAppDetails are the audit record's details of the rule's
// github_app: the App, installation and key reference, the repository
// and permissions asked for and, once minted, the token's expiry and
// granted permissions. Never the token.
func (x *execution) githubAppDetails(rec *audit.Record) {
	g := x.rule.GitHubApp
	if g == nil {
		return
	}
	setDetail(rec, "github_app", fmt.Sprintf("app %s installation %d key %s api %s", g.AppID, g.InstallationID, g.PrivateKey, g.API))
	if x.ghRepo != (ghapp.Repository{}) {
		setDetail(rec, "github_app_repository", x.ghRepo.String())
	}
	setDetail(rec, "github_app_permissions", g.Permissions.String())
	if t := x.ghToken; t != nil {
		setDetail(rec, "github_app_token_expires", t.token.ExpiresAt.UTC().Format(time.RFC3339))
		setDetail(rec, "github_app_token_permissions", t.token.Permissions.String())
	}
}
