package githubapp

import (
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"coily.dev/coily/ghapp"
	"coily.dev/coily/keystore/credref"
	"coily.dev/coily/policy"
)

// Key is the rule's key this package reads.
const Key = "github_app"

func init() { policy.RegisterSection(section{}) }

// Of is the rule's github_app: the App whose installation token of one
// repository the command gets; nil for none.
func Of(r *policy.Rule) *GitHubApp {
	g, _ := r.Section(Key).(*GitHubApp)
	return g
}

// section reads `github_app:`.
type section struct{}

func (section) Key() string         { return Key }
func (section) Stage() policy.Stage { return policy.AfterCredentials }

// Backends is that of the App's private key.
func (section) Backends(r *policy.Rule) []string { return []string{Of(r).PrivateKey.Backend} }

// Warnings warn of a rule whose command may outlive its token.
func (section) Warnings(r *policy.Rule) []string {
	if r.Timeout > ghapp.MaxTokenLife {
		return []string{fmt.Sprintf("rule %q has timeout %s, but its github_app token expires within an hour: a command running longer loses it", r.Name, r.Timeout)}
	}
	return nil
}

// CheckArgs refuses arguments from which no repository can be taken for
// the token (Repository): such arguments do not match the rule.
func (section) CheckArgs(r *policy.Rule, args []string) string {
	_, why := Repository(r, args)
	return why
}

// Notes explain the rule's github_app for `coily policy check`.
func Notes(r *policy.Rule) []string {
	g := Of(r)
	if g == nil {
		return nil
	}
	return []string{fmt.Sprintf("rule %q github_app: %s", r.Name, g.Summary())}
}

// GitHubApp is a rule's `github_app:`: for each exec the server mints an
// installation token of a GitHub App, scoped to one repository (fixed, or
// taken from a flag the rule's patterns pin) and to the permissions
// listed, puts it into the child's environment under Env, and revokes it
// when the command ends (package ghapp). The App's private key stays in
// the keystore.
type GitHubApp struct {
	// AppID is the App's id (digits) or client id (Iv…): the JWT's iss.
	AppID string
	// InstallationID is the installation the token is minted from.
	InstallationID int64
	// PrivateKey is the reference of the App's private key.
	PrivateKey credref.Ref
	// API is the GitHub API's base URL; Host the web host that names its
	// repositories (ghapp.WebHost).
	API  *url.URL
	Host string
	// Permissions are what the token may do, at most.
	Permissions ghapp.Permissions
	// Repository is the fixed repository (`repository:`), or zero when
	// RepositoryFrom names the flags the command gives it with.
	Repository     ghapp.Repository
	RepositoryFrom []string
	// Env names the variables of the child the token goes into.
	Env []string
}

// DefaultGitHubAPI is github.com's API.
const DefaultGitHubAPI = "https://api.github.com"

// Bounds of a github_app block.
const (
	maxGitHubAppEnv   = 4
	maxRepositoryFrom = 4
)

// githubAppFields are the keys of a `github_app` block.
var githubAppFields = []string{"app_id", "installation_id", "private_key", "api_url", "permissions", "repository",
	"repository_from", "env"}

// clientIDPattern is a GitHub App's client id, the other form of iss.
var clientIDPattern = regexp.MustCompile(`^Iv[0-9A-Za-z.]{1,64}$`)

// maxJSONInt is the largest id that survives JSON's numbers.
const maxJSONInt = 1<<53 - 1

// Parse reads `github_app:`. It runs after the rule's arguments
// (repository_from names flags they must pin), environment and
// credentials (the token's variables may be neither).
func (section) Parse(p *policy.SectionParser, n *yaml.Node) any {
	r := p.Rule
	if n.Kind != yaml.MappingNode {
		p.FailAt(n, "rule %q: github_app must be a map (app_id, installation_id, private_key, permissions, repository or repository_from, env)", r.Name)
		return nil
	}
	g := &GitHubApp{}
	fields := map[string]*yaml.Node{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := n.Content[i]
		switch {
		case fields[k.Value] != nil:
			p.FailAt(k, "rule %q: github_app: %s given twice", r.Name, k.Value)
			return nil
		case !slices.Contains(githubAppFields, k.Value):
			p.FailAt(k, "rule %q: github_app: unknown key %q (want %s)", r.Name, k.Value, strings.Join(githubAppFields, ", "))
			return nil
		}
		fields[k.Value] = n.Content[i+1]
	}
	for _, req := range []string{"app_id", "installation_id", "private_key", "permissions", "env"} {
		if fields[req] == nil {
			p.FailAt(n, "rule %q: github_app needs %s", r.Name, req)
			return nil
		}
	}
	if (fields["repository"] == nil) == (fields["repository_from"] == nil) {
		p.FailAt(n, "rule %q: github_app needs repository (one fixed OWNER/NAME) or repository_from (the flags that name it, such as [--repo, -R]), not both", r.Name)
		return nil
	}
	ok := githubAppIDs(p, r.Name, g, fields) &&
		githubAppKey(p, r.Name, g, fields["private_key"]) &&
		githubAppAPI(p, r.Name, g, fields["api_url"]) &&
		githubAppPermissions(p, r.Name, g, fields["permissions"]) &&
		githubAppRepository(p, r, g, fields) &&
		githubAppEnv(p, r, g, fields["env"])
	if !ok {
		return nil
	}
	return g
}

// githubAppIDs reads app_id and installation_id.
func githubAppIDs(p *policy.SectionParser, rule string, g *GitHubApp, fields map[string]*yaml.Node) bool {
	v := fields["app_id"]
	switch {
	case v.Kind == yaml.ScalarNode && v.Tag == "!!int":
		id, err := strconv.ParseInt(v.Value, 10, 64)
		if err != nil || id < 1 || id > maxJSONInt {
			p.FailAt(v, "rule %q: github_app app_id must be a positive number (the App's id) or its client id (Iv…)", rule)
			return false
		}
		g.AppID = strconv.FormatInt(id, 10)
	case v.Kind == yaml.ScalarNode && v.Tag == "!!str" && clientIDPattern.MatchString(v.Value):
		g.AppID = v.Value
	default:
		p.FailAt(v, "rule %q: github_app app_id must be a positive number (the App's id) or its client id (Iv…)", rule)
		return false
	}
	v = fields["installation_id"]
	id, err := strconv.ParseInt(v.Value, 10, 64)
	if v.Kind != yaml.ScalarNode || v.Tag != "!!int" || err != nil || id < 1 || id > maxJSONInt {
		p.FailAt(v, "rule %q: github_app installation_id must be a positive number", rule)
		return false
	}
	g.InstallationID = id
	return true
}

// githubAppKey reads private_key: a reference, never the key itself.
func githubAppKey(p *policy.SectionParser, rule string, g *GitHubApp, v *yaml.Node) bool {
	if v.Kind != yaml.ScalarNode || v.Tag != "!!str" {
		p.FailAt(v, "rule %q: github_app private_key must be a reference such as vault:secret/coily/ghapp#private_key", rule)
		return false
	}
	if strings.Contains(v.Value, "PRIVATE KEY") || strings.ContainsAny(v.Value, "\n\r") {
		// Never echo what may be a key pasted in place of its reference.
		p.FailAt(v, "rule %q: github_app private_key: this is a private key, not a reference to one: store it in Vault or the keychain and name it here (vault:secret/coily/ghapp#private_key)", rule)
		return false
	}
	ref, err := credref.Parse(v.Value)
	if err != nil {
		p.FailAt(v, "rule %q: github_app private_key: %v", rule, err)
		return false
	}
	g.PrivateKey = ref
	return true
}

// githubAppAPI reads api_url (github.com's API when absent).
func githubAppAPI(p *policy.SectionParser, rule string, g *GitHubApp, v *yaml.Node) bool {
	s := DefaultGitHubAPI
	if v != nil {
		if v.Kind != yaml.ScalarNode || v.Tag != "!!str" {
			p.FailAt(v, "rule %q: github_app api_url must be a URL such as %s or https://HOST/api/v3", rule, DefaultGitHubAPI)
			return false
		}
		s = v.Value
	}
	u, err := ghapp.ParseAPIURL(s)
	if err != nil {
		p.FailAt(v, "rule %q: github_app %v", rule, err)
		return false
	}
	g.API, g.Host = u, ghapp.WebHost(u)
	return true
}

// githubAppPermissions reads permissions: repository permissions at read
// or write.
func githubAppPermissions(p *policy.SectionParser, rule string, g *GitHubApp, v *yaml.Node) bool {
	if v.Kind != yaml.MappingNode || len(v.Content) == 0 {
		p.FailAt(v, "rule %q: github_app permissions must map permissions to read or write, such as {issues: write}", rule)
		return false
	}
	g.Permissions = ghapp.Permissions{}
	for i := 0; i+1 < len(v.Content); i += 2 {
		k, lv := v.Content[i], v.Content[i+1]
		switch {
		case k.Kind != yaml.ScalarNode || lv.Kind != yaml.ScalarNode || lv.Tag != "!!str":
			p.FailAt(k, "rule %q: github_app permissions must map permissions to read or write, such as {issues: write}", rule)
			return false
		case g.Permissions[k.Value] != "":
			p.FailAt(k, "rule %q: github_app permission %s given twice", rule, k.Value)
			return false
		}
		if err := ghapp.CheckPermission(k.Value, lv.Value); err != nil {
			p.FailAt(k, "rule %q: github_app %v", rule, err)
			return false
		}
		g.Permissions[k.Value] = lv.Value
	}
	return true
}

// githubAppRepository reads repository (fixed) or repository_from: flags
// the rule lists with value patterns, so that the repository is taken
// only from a value the patterns pin (never from free text).
func githubAppRepository(p *policy.SectionParser, r *policy.Rule, g *GitHubApp, fields map[string]*yaml.Node) bool {
	if v := fields["repository"]; v != nil {
		if v.Kind != yaml.ScalarNode || v.Tag != "!!str" {
			p.FailAt(v, "rule %q: github_app repository must be OWNER/NAME", r.Name)
			return false
		}
		repo, err := ghapp.ParseRepository(v.Value, g.Host)
		if err != nil {
			p.FailAt(v, "rule %q: github_app %v", r.Name, err)
			return false
		}
		g.Repository = repo
		return true
	}
	v := fields["repository_from"]
	flags, ok := stringOrList(v, maxRepositoryFrom)
	if !ok {
		p.FailAt(v, "rule %q: github_app repository_from must be a flag or a list of 1 to %d flags (such as [--repo, -R])", r.Name, maxRepositoryFrom)
		return false
	}
	for i, f := range flags {
		spec, listed := r.Args.Flags[f]
		switch {
		case slices.Contains(flags[:i], f):
			p.FailAt(v, "rule %q: github_app repository_from names %s twice", r.Name, f)
			return false
		case !policy.ValidFlag(f):
			p.FailAt(v, "rule %q: github_app repository_from %s must be a flag written --name or -c", r.Name, policy.QuoteShort(f))
			return false
		case !listed || spec.Bool:
			p.FailAt(v, "rule %q: github_app repository_from %s must be a flag the rule's flags list with value patterns (the repository comes only from a value they pin)", r.Name, f)
			return false
		}
	}
	g.RepositoryFrom = flags
	return true
}

// githubAppEnv reads env: the variables the token goes into, which no
// caller may pass and no other credential fills.
func githubAppEnv(p *policy.SectionParser, r *policy.Rule, g *GitHubApp, v *yaml.Node) bool {
	names, ok := stringOrList(v, maxGitHubAppEnv)
	if !ok {
		p.FailAt(v, "rule %q: github_app env must be a variable or a list of 1 to %d (such as GH_TOKEN)", r.Name, maxGitHubAppEnv)
		return false
	}
	for i, name := range names {
		switch {
		case !policy.ValidEnvName(name):
			p.FailAt(v, "rule %q: github_app env: bad variable name %q", r.Name, name)
			return false
		case slices.Contains(names[:i], name):
			p.FailAt(v, "rule %q: github_app env names %s twice", r.Name, name)
			return false
		case policy.ReservedEnv(name):
			p.FailAt(v, "rule %q: github_app env %s is set by the server", r.Name, name)
			return false
		case slices.Contains(r.Env, name):
			p.FailAt(v, "rule %q: %s is both the github_app token and a variable callers may pass", r.Name, name)
			return false
		case r.Credentials[name] != (credref.Ref{}):
			p.FailAt(v, "rule %q: %s is both the github_app token and a credential", r.Name, name)
			return false
		}
	}
	g.Env = names
	return true
}

// stringOrList reads a string or a list of 1 to max strings.
func stringOrList(v *yaml.Node, max int) ([]string, bool) {
	if v.Kind == yaml.ScalarNode && v.Tag == "!!str" {
		return []string{v.Value}, true
	}
	if v.Kind != yaml.SequenceNode || len(v.Content) == 0 || len(v.Content) > max {
		return nil, false
	}
	var out []string
	for _, c := range v.Content {
		if c.Kind != yaml.ScalarNode || c.Tag != "!!str" {
			return nil, false
		}
		out = append(out, c.Value)
	}
	return out, true
}

// Repository is the repository the rule's github_app token is for,
// given the arguments (argv[1:], as matched): the fixed one, or the one
// the repository_from flags name — present, the same each time, and
// OWNER/NAME (or HOST/OWNER/NAME on the App's host). A rule without
// github_app gives the zero repository. The reason says why none can be
// taken; such arguments do not match the rule.
func Repository(r *policy.Rule, args []string) (ghapp.Repository, string) {
	g := Of(r)
	if g == nil {
		return ghapp.Repository{}, ""
	}
	if len(g.RepositoryFrom) == 0 {
		return g.Repository, ""
	}
	from := strings.Join(g.RepositoryFrom, " or ")
	vals, ok := r.Args.FlagValues(args, g.RepositoryFrom)
	switch {
	case !ok:
		return ghapp.Repository{}, "the arguments do not match the rule"
	case len(vals) == 0:
		return ghapp.Repository{}, fmt.Sprintf("github_app takes the repository from %s, which is not given", from)
	}
	var repo ghapp.Repository
	for i, v := range vals {
		got, err := ghapp.ParseRepository(v, g.Host)
		switch {
		case err != nil:
			return ghapp.Repository{}, fmt.Sprintf("github_app: %s %s: %v", from, policy.QuoteShort(v), err)
		case i > 0 && got != repo:
			return ghapp.Repository{}, fmt.Sprintf("github_app: %s given more than once with different repositories", from)
		}
		repo = got
	}
	return repo, ""
}

// Summary says what the rule's command gets, for `coily policy check`.
func (g *GitHubApp) Summary() string {
	repo := "the repository " + strings.Join(g.RepositoryFrom, " or ") + " names (OWNER/NAME or " + g.Host + "/OWNER/NAME)"
	if len(g.RepositoryFrom) == 0 {
		repo = g.Repository.String()
	}
	return fmt.Sprintf("the command gets a GitHub App installation token in %s (App %s, installation %d, key %s, API %s) for %s alone, with %s; it expires within the hour and is revoked when the command ends",
		strings.Join(g.Env, " and "), g.AppID, g.InstallationID, g.PrivateKey, g.API, repo, g.Permissions)
}
