package gitproxy

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"coily.dev/coily/attach/cabundle"
	"coily.dev/coily/ghapp"
	"coily.dev/coily/refusal"
)

// appToken mints the installation token of the remote's GitHub App for
// the request's repository alone, with contents: write for a push and
// read otherwise, and returns it with what revokes it. The API is
// reached as upstream is: at an address resolved once and classified
// (a non-public one needs the remote's allow_cidrs), with the remote's
// ca_file when it names one. The request's audit lists each token minted
// (repository, permissions, expiry, whether it was revoked), never the
// token; a failure names the App and the repository, never a value.
func (p *Proxy) appToken(ctx context.Context, rq *request, write bool) (ghapp.Token, func(), error) {
	rem, repo, app := rq.remote, rq.target.Repo, rq.remote.GitHubApp
	r, err := ghapp.ParseRepository(strings.TrimSuffix(repo, ".git"), "")
	if err != nil {
		return ghapp.Token{}, nil, refusal.Wrap(refusal.PolicyDeny, err, "git remote %q: no GitHub App token for %s: %v", rem.Name, repo, err)
	}
	unavailable := func(err error) (ghapp.Token, func(), error) {
		return ghapp.Token{}, nil, refusal.Wrap(refusal.CredentialUnavailable, err,
			"git remote %q: GitHub App installation token for %s (App %s, installation %d): %v", rem.Name, r, app.AppID, app.InstallationID, err)
	}
	v, err := p.credential(ctx, app.PrivateKey)
	if err != nil {
		return unavailable(fmt.Errorf("private key %s: %w", app.PrivateKey, err))
	}
	key, err := ghapp.ParsePrivateKey(v)
	if err != nil {
		return unavailable(fmt.Errorf("private key %s: not usable as a GitHub App private key: %v", app.PrivateKey, err))
	}
	addr, err := p.resolve(ctx, rem, app.API.Hostname())
	if err != nil {
		return ghapp.Token{}, nil, err
	}
	tr, err := apiTransport(addr, rem.CAFile)
	if err != nil {
		return unavailable(fmt.Errorf("ca_file %s: %w", rem.CAFile, err))
	}
	level := "read"
	if write {
		level = "write"
	}
	c := &ghapp.Client{API: app.API, HTTP: ghapp.NewHTTPClient(tr)}
	tok, err := c.Mint(ctx, ghapp.Request{AppID: app.AppID, Installation: app.InstallationID, Key: key,
		Repository: r, Permissions: ghapp.Permissions{"contents": level}})
	if err != nil {
		tr.CloseIdleConnections()
		return unavailable(err)
	}
	p.log.Info("git proxy: github app token minted", "remote", rem.Name, "repository", tok.Repository.String(),
		"permissions", tok.Permissions.String(), "expires", tok.ExpiresAt.UTC().Format(time.RFC3339))
	i := len(rq.appTokens)
	rq.appTokens = append(rq.appTokens, fmt.Sprintf("%s %s expires %s", tok.Repository, tok.Permissions, tok.ExpiresAt.UTC().Format(time.RFC3339)))
	revoke := func() {
		err := c.Revoke(context.WithoutCancel(ctx), tok.Value)
		tr.CloseIdleConnections()
		if err == nil {
			rq.appTokens[i] += " revoked"
			return
		}
		rq.appTokens[i] += " revocation failed: " + err.Error()
		p.log.Error("git proxy: github app token revocation failed; it ends at its expiry", "remote", rem.Name,
			"repository", tok.Repository.String(), "expires", tok.ExpiresAt.UTC().Format(time.RFC3339), "err", err)
	}
	return tok, revoke, nil
}

// apiTransport reaches the API at addr whatever the name asked for (the
// address the proxy resolved and classified, on the URL's port), with
// the system's trust roots or caFile's instead, and no proxy.
func apiTransport(addr netip.Addr, caFile string) (*http.Transport, error) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.Proxy = nil
	var d net.Dialer
	tr.DialContext = func(ctx context.Context, network, hostport string) (net.Conn, error) {
		_, port, err := net.SplitHostPort(hostport)
		if err != nil {
			return nil, err
		}
		if _, err := strconv.Atoi(port); err != nil {
			return nil, fmt.Errorf("bad port %q", port)
		}
		return d.DialContext(ctx, network, net.JoinHostPort(addr.String(), port))
	}
	if caFile == "" {
		return tr, nil
	}
	pool, err := cabundle.Pool(caFile)
	if err != nil {
		return nil, err
	}
	tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	return tr, nil
}
