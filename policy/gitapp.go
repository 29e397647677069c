package policy

import (
	"cmp"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"coily.dev/coily/ghapp"
	"coily.dev/coily/keystore/credref"
)

// GitApp is a git remote's `github_app:`: the GitHub App whose
// installation token is the remote's credential. The git proxy mints one
// per request, for the one repository asked for (contents: read for a
// fetch, write for a push), and revokes it when the request ends; the
// App's private key stays in the keystore and the server.
type GitApp struct {
	// AppID is the App's id (digits) or client id (Iv…): the JWT's iss.
	AppID string
	// InstallationID is the installation the tokens are minted from.
	InstallationID int64
	// PrivateKey is the reference of the App's private key.
	PrivateKey credref.Ref
	// API is the GitHub API's base URL (ghapp.ParseAPIURL).
	API *url.URL
}

type gitAppFile struct {
	AppID          string `yaml:"app_id"`
	InstallationID int64  `yaml:"installation_id"`
	PrivateKey     string `yaml:"private_key"`
	APIURL         string `yaml:"api_url"`
}

// defaultGitHubAPI is github.com's API, a github_app's when it names
// none.
const defaultGitHubAPI = "https://api.github.com"

// gitApp reads a remote's github_app: exactly one of it and credential;
// an API whose web host is the remote's; a path of OWNER/NAME, the
// repositories a token can be minted for.
func (b *builder) gitApp(r *GitRemote, f *gitRemoteFile, at func(...any) []any) *GitApp {
	a, pos := f.GitHubApp, b.at(at("github_app")...)
	fail := func(format string, args ...any) *GitApp {
		b.failAt(pos, "git remote %q: github_app: "+format, append([]any{r.Name}, args...)...)
		return nil
	}
	if f.Credential != "" {
		return fail("a remote has a credential or a github_app, not both")
	}
	if r.SSH != nil {
		return fail("an ssh remote authenticates with ssh_key, not a GitHub App's token")
	}
	if err := ghapp.CheckAppID(a.AppID); err != nil {
		return fail("%v", err)
	}
	if a.InstallationID < 1 || a.InstallationID > ghapp.MaxID {
		return fail("installation_id must be a positive number")
	}
	if strings.Contains(a.PrivateKey, "PRIVATE KEY") || strings.ContainsAny(a.PrivateKey, "\n\r") {
		// Never echo what may be a key pasted in place of its reference.
		return fail("private_key: this is a private key, not a reference to one: store it in Vault or the keychain and name it here")
	}
	key, err := credref.Parse(a.PrivateKey)
	if err != nil {
		return fail("private_key: %v", err)
	}
	api, err := ghapp.ParseAPIURL(cmp.Or(a.APIURL, defaultGitHubAPI))
	if err != nil {
		return fail("%v", err)
	}
	host := r.Host
	if r.Port != 443 {
		host += ":" + strconv.Itoa(r.Port)
	}
	if web := ghapp.WebHost(api); !strings.EqualFold(web, host) {
		return fail("api_url %s serves repositories on %s, not on the remote's host %s", api, web, host)
	}
	if strings.Count(r.Path, "/") != 1 {
		return fail("the url's path must be OWNER/NAME (a pattern of them), the repositories a token is minted for")
	}
	return &GitApp{AppID: a.AppID, InstallationID: a.InstallationID, PrivateKey: key, API: api}
}

// Summary names the App for `coily policy check` and the audit.
func (a *GitApp) Summary() string {
	return fmt.Sprintf("app %s installation %d key %s api %s", a.AppID, a.InstallationID, a.PrivateKey, a.API)
}
