package githubapp_test

import (
	"flag"
	"reflect"
	"slices"
	"strings"
	"testing"

	"coily.dev/coily/attach/githubapp"
	"coily.dev/coily/ghapp"
	"coily.dev/coily/internal/policytest"
	"coily.dev/coily/keystore/credref"
	"coily.dev/coily/policy"
)

func TestLoadGitHubApp(t *testing.T) {
	p, err := policy.Load("testdata/github-app.yaml")
	if err != nil {
		t.Fatal(err)
	}
	rules := p.Rules()
	want := []githubapp.GitHubApp{
		{AppID: "123", InstallationID: 456, PrivateKey: credref.Ref{Backend: credref.Vault, Path: "secret/coily/ghapp", Field: "private_key"},
			Host: "github.com", Permissions: ghapp.Permissions{"issues": "write"}, RepositoryFrom: []string{"--repo", "-R"}, Env: []string{"GH_TOKEN"}},
		{AppID: "Iv1.8a61f9b3a7aba766", InstallationID: 1<<53 - 1, PrivateKey: credref.Ref{Backend: credref.Keychain, Path: "coily", Field: "ghapp"},
			Host: "ghe.example.com", Permissions: ghapp.Permissions{"pull_requests": "read", "contents": "read"}, RepositoryFrom: []string{"--repo"},
			Env: []string{"GH_ENTERPRISE_TOKEN", "GH_TOKEN"}},
		{AppID: "7", InstallationID: 8, PrivateKey: credref.Ref{Backend: credref.File, Path: "ghapp"}, Host: "github.com",
			Permissions: ghapp.Permissions{"contents": "write"}, Repository: ghapp.Repository{Owner: "alice", Name: "repo"}, Env: []string{"APP_TOKEN"}},
	}
	apis := []string{"https://api.github.com", "https://ghe.example.com/api/v3", "https://api.github.com"}
	for i, r := range rules {
		g := *githubapp.Of(r)
		if g.API.String() != apis[i] {
			t.Errorf("rule %s: API %s, want %s", r.Name, g.API, apis[i])
		}
		g.API = nil
		if !reflect.DeepEqual(g, want[i]) {
			t.Errorf("rule %s: %+v\nwant %+v", r.Name, g, want[i])
		}
	}
	if got := p.CredentialBackends(); !slices.Equal(got, []string{"file", "keychain", "vault"}) {
		t.Errorf("CredentialBackends = %q", got)
	}
}

// The repository comes only from the values of the repository_from
// flags, read as the rule's patterns read them; anything doubtful does not
// match the rule.
func TestGitHubRepository(t *testing.T) {
	p, err := policy.Load("testdata/github-app.yaml")
	if err != nil {
		t.Fatal(err)
	}
	create, ghe, fixed := p.Rules()[0], p.Rules()[1], p.Rules()[2]
	ok := []struct {
		rule *policy.Rule
		args []string
		want string
	}{
		{create, []string{"issue", "create", "--repo", "alice/repo", "--title", "t", "--body", "b"}, "alice/repo"},
		{create, []string{"issue", "create", "-R", "alice/repo"}, "alice/repo"},
		{create, []string{"issue", "create", "-Ralice/repo"}, "alice/repo"},
		{create, []string{"issue", "create", "--repo=alice/repo"}, "alice/repo"},
		{create, []string{"issue", "create", "--repo", "alice/repo", "-R", "alice/repo"}, "alice/repo"},
		{create, []string{"issue", "create", "--title", "--repo", "--repo", "alice/x"}, "alice/x"}, // the title is "--repo"
		{create, []string{"issue", "create", "--body", "-R mallory/x", "-R", "alice/x"}, "alice/x"},
		{ghe, []string{"pr", "list", "--repo", "ghe.example.com/alice/y"}, "alice/y"},
		{fixed, []string{"push", "origin", "main"}, "alice/repo"},
		{fixed, []string{"push", "--repo", "mallory/x"}, "alice/repo"}, // a fixed repository ignores argv
	}
	for _, c := range ok {
		got, why := githubapp.Repository(c.rule, c.args)
		if why != "" || got.String() != c.want {
			t.Errorf("%s %q: %v (%s), want %s", c.rule.Name, c.args, got, why, c.want)
		}
	}
	bad := []struct {
		rule *policy.Rule
		args []string
		why  string
	}{
		{create, []string{"issue", "create"}, "which is not given"},
		{create, []string{"issue", "create", "--title", "-R alice/x"}, "which is not given"},
		{create, []string{"issue", "create", "--repo", "alice/a", "-R", "alice/b"}, "different repositories"},
		{create, []string{"issue", "create", "--repo", "alice/a", "--repo", "alice/A"}, "different repositories"},
		{create, []string{"issue", "create", "-R=alice/repo"}, "do not match"}, // getopt reads "=alice/repo"
		{create, []string{"issue", "create", "--repo", "alice/x/y"}, "want OWNER/NAME"},
		{create, []string{"issue", "create", "--repo", "alice/"}, "name must be"},
		{create, []string{"issue", "create", "--repo", "alice/.."}, "name must be"},
		{create, []string{"issue", "create", "--repo", "alice/x y"}, "name must be"},
		{create, []string{"issue", "create", "--repo", "alice/x\n"}, "name must be"},
		{create, []string{"issue", "create", "--repo", "alice/https://evil"}, "want OWNER/NAME"},
		{create, []string{"issue", "create", "--repo", "mallory/x"}, "do not match"},
		{create, []string{"issue", "create", "--repo"}, "do not match"},
		{create, []string{"issue", "create", "--", "--repo", "alice/x"}, "do not match"},
		{ghe, []string{"pr", "list", "--repo", "ghe.example.com/alice/y/z"}, "want OWNER/NAME"},
	}
	for _, c := range bad {
		got, why := githubapp.Repository(c.rule, c.args)
		if why == "" || !strings.Contains(why, c.why) {
			t.Errorf("%s %q: %v (%q), want a refusal saying %q", c.rule.Name, c.args, got, why, c.why)
		}
	}
	// A decision carries the arguments the repository comes from;
	// arguments without one do not match the rule, and the denial says
	// why.
	s := policy.Subject{Principal: "op", Roles: []string{policy.OperatorRole}}
	pol, err := policy.Parse("p.yaml", []byte(`version: 1
roles: {operator: {permissions: [exec], commands: ["*"]}}
commands:
  - name: gh-issue-create
    binary: /bin/sh
    args: [issue, create]
    flags: {--repo: "alice/*", -R: "alice/*"}
    github_app: {app_id: 1, installation_id: 2, private_key: "file:k", permissions: {issues: write}, repository_from: [--repo, -R], env: GH_TOKEN}
`))
	if err != nil {
		t.Fatal(err)
	}
	d := pol.DecideExec(s, policy.Request{Argv: []string{"/bin/sh", "issue", "create", "-R", "alice/repo"}})
	if d.Result != policy.Allow {
		t.Fatalf("decision %+v", d)
	}
	if repo, _ := githubapp.Repository(d.Rule, d.Args); repo.String() != "alice/repo" {
		t.Fatalf("decision %+v: repository %v", d, repo)
	}
	d = pol.DecideExec(s, policy.Request{Argv: []string{"/bin/sh", "issue", "create"}})
	if d.Result != policy.Deny || !strings.Contains(d.Reason, "github_app takes the repository from --repo or -R, which is not given") {
		t.Fatalf("decision %+v", d)
	}
}

func FuzzGitHubRepository(f *testing.F) {
	for _, args := range [][]string{
		{"issue", "create", "--repo", "alice/repo"}, {"issue", "create", "-R=alice/x"}, {"issue", "create", "-Ralice/x", "--repo", "alice/x"},
		{"issue", "create", "--title", "--repo", "--repo", "alice/x"}, {"issue", "create", "--", "--repo", "alice/x"},
	} {
		f.Add(strings.Join(args, "\x00"))
	}
	p, err := policy.Load("testdata/github-app.yaml")
	if err != nil {
		f.Fatal(err)
	}
	r := p.Rules()[0]
	f.Fuzz(func(t *testing.T, data string) {
		args := strings.Split(data, "\x00")
		repo, why := githubapp.Repository(r, args)
		if why != "" {
			return
		}
		// A repository is taken only from arguments the rule admits, and
		// is OWNER/NAME under alice (the patterns pin it).
		if ok, _ := r.Args.MatchAllow(args); !ok {
			t.Fatalf("repository %s from arguments the rule refuses: %q", repo, args)
		}
		if _, err := ghapp.ParseRepository(repo.String(), ""); err != nil || repo.Owner != "alice" {
			t.Fatalf("repository %q from %q", repo, args)
		}
		if !slices.ContainsFunc(args, func(a string) bool { return strings.Contains(a, repo.String()) }) {
			t.Fatalf("repository %s is in no argument of %q", repo, args)
		}
	})
}

// Where the patterns admit both readings of "-R=v" ("=v" and "v"), the
// repository is still refused: the two readings differ.
func TestGitHubRepositoryShortEquals(t *testing.T) {
	p, err := policy.Parse("p.yaml", []byte(`version: 1
commands:
  - name: gh
    binary: /usr/bin/gh
    args: [issue, create]
    flags: {-R: "*"}
    github_app: {app_id: 1, installation_id: 2, private_key: "file:k", permissions: {issues: write}, repository_from: -R, env: GH_TOKEN}
`))
	if err != nil {
		t.Fatal(err)
	}
	r := p.Rules()[0]
	for _, args := range [][]string{{"issue", "create", "-R=alice/repo"}, {"issue", "create", "-R", "=alice/repo"}} {
		if got, why := githubapp.Repository(r, args); why == "" {
			t.Errorf("%q gave %s", args, got)
		}
	}
	if got, why := githubapp.Repository(r, []string{"issue", "create", "-R", "github.com/alice/repo"}); why != "" || got.String() != "alice/repo" {
		t.Errorf("github.com/alice/repo: %v %s", got, why)
	}
}

var update = flag.Bool("update", false, "rewrite the golden files in testdata/broken")

// The broken policies of github_app fail with the errors of their golden
// files.
func TestLoadBroken(t *testing.T) {
	policytest.Broken(t, "testdata/broken", *update, nil, nil)
}

// FuzzParse parses policies seeded from this package's: what loads has a
// github_app only on allow rules, with an https API, permissions, one
// repository source (repository_from pinned by the rule's flags) and
// variables no caller passes and no credential fills.
func FuzzParse(f *testing.F) {
	policytest.Fuzz(f, []string{"testdata", "testdata/broken"}, func(t *testing.T, p *policy.Policy) {
		for _, r := range p.Rules() {
			g := githubapp.Of(r)
			if g == nil {
				continue
			}
			if r.Effect != policy.Allow || g.API == nil || g.API.Scheme != "https" || len(g.Permissions) == 0 || len(g.Env) == 0 ||
				(g.Repository == ghapp.Repository{}) == (len(g.RepositoryFrom) == 0) {
				t.Fatalf("rule %q: github_app %+v", r.Name, *g)
			}
			for _, fl := range g.RepositoryFrom {
				if spec, ok := r.Args.Flags[fl]; !ok || spec.Bool || r.Args.AnyFlags {
					t.Fatalf("rule %q: repository_from %s is not pinned by the rule's flags", r.Name, fl)
				}
			}
			for _, e := range g.Env {
				if slices.Contains(r.Env, e) || r.Credentials[e] != (credref.Ref{}) {
					t.Fatalf("rule %q: github_app env %s is also passed or a credential", r.Name, e)
				}
			}
		}
	})
}
