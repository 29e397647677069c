package policy_test

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"coily.dev/coily/attach/gitcredentials"
	"coily.dev/coily/attach/githubapp"
	"coily.dev/coily/attach/sshkeys"
	"coily.dev/coily/ghapp"
	"coily.dev/coily/keystore/credref"
	"coily.dev/coily/policy"
)

// The sections of package attach register themselves: the policies here
// (the examples above all) name them, and checkRules asserts what each
// guarantees.

// checkGitCredentials asserts what a loaded rule's git_credentials
// guarantee: a proxied bwrap rule, exact hosts, each once, with a port,
// a user name and a reference.
func checkGitCredentials(t testing.TB, r *policy.Rule) {
	t.Helper()
	if len(gitcredentials.Of(r)) > 0 && (r.Network != policy.NetworkProxied || r.Sandbox != policy.SandboxBwrap) {
		t.Errorf("rule %q: git_credentials with network %q, sandbox %q", r.Name, r.Network, r.Sandbox)
	}
	seen := map[string]bool{}
	for _, g := range gitcredentials.Of(r) {
		hp, err := policy.ParseHostPort(g.Host)
		if err != nil || hp.Suffix || hp.Port != 0 || g.Port < 1 || g.Port > 65535 || seen[g.Address()] ||
			g.Username == "" || strings.ContainsAny(g.Username, "\n\x00=") || g.Password.Backend == "" {
			t.Errorf("rule %q: git credential %+v", r.Name, g)
		}
		seen[g.Address()] = true
	}
	if r.CAFile != "" && (!filepath.IsAbs(r.CAFile) || filepath.Clean(r.CAFile) != r.CAFile || r.Sandbox != policy.SandboxBwrap) {
		t.Errorf("rule %q: ca_file %q (sandbox %q)", r.Name, r.CAFile, r.Sandbox)
	}
}

// checkSSHKeys asserts what a loaded rule's ssh_keys guarantee: a proxied
// bwrap rule; each key once, with a reference and 1 to 16 hosts; each
// host under one key only, pinned and reachable.
func checkSSHKeys(t testing.TB, r *policy.Rule) {
	t.Helper()
	if len(sshkeys.Of(r)) == 0 {
		return
	}
	if r.Network != policy.NetworkProxied || r.Sandbox != policy.SandboxBwrap || len(sshkeys.Of(r)) > sshkeys.MaxSSHKeys {
		t.Errorf("rule %q: %d ssh_keys with network %q, sandbox %q", r.Name, len(sshkeys.Of(r)), r.Network, r.Sandbox)
	}
	keys, hosts := map[credref.Ref]bool{}, map[policy.SSHHost]bool{}
	for _, k := range sshkeys.Of(r) {
		if k.Key.Backend == "" || keys[k.Key] || len(k.Hosts) == 0 || len(k.Hosts) > 16 {
			t.Errorf("rule %q: ssh key %+v", r.Name, k)
		}
		keys[k.Key] = true
		for _, h := range k.Hosts {
			if hosts[h] || len(r.Egress.PinsFor(h)) == 0 || !r.Egress.ReachesSSH(h) {
				t.Errorf("rule %q: ssh key %s: host %s twice, unpinned or unreachable", r.Name, k.Key, h)
			}
			hosts[h] = true
		}
		if len(sshkeys.Pins(r, k)) == 0 {
			t.Errorf("rule %q: ssh key %s has no pinned host key", r.Name, k.Key)
		}
	}
}

// checkGitHubApp asserts what a loaded rule's github_app guarantees: an
// App and installation, a reference, an https API, repository
// permissions, one repository source (a fixed one, or flags the rule
// lists with value patterns), variables no caller passes.
func checkGitHubApp(t testing.TB, r *policy.Rule) {
	t.Helper()
	g := githubapp.Of(r)
	if g == nil {
		return
	}
	if g.AppID == "" || g.InstallationID < 1 || g.PrivateKey.Backend == "" || g.API == nil || g.API.Scheme != "https" ||
		g.Host == "" || len(g.Permissions) == 0 || len(g.Env) == 0 {
		t.Errorf("rule %q: github_app %+v", r.Name, *g)
	}
	for k, v := range g.Permissions {
		if ghapp.CheckPermission(k, v) != nil {
			t.Errorf("rule %q: permission %s: %s", r.Name, k, v)
		}
	}
	if (g.Repository == ghapp.Repository{}) == (len(g.RepositoryFrom) == 0) {
		t.Errorf("rule %q: repository %v and repository_from %q", r.Name, g.Repository, g.RepositoryFrom)
	}
	for _, f := range g.RepositoryFrom {
		if spec, ok := r.Args.Flags[f]; !ok || spec.Bool || r.Args.AnyFlags {
			t.Errorf("rule %q: repository_from %s is not pinned by the rule's flags", r.Name, f)
		}
	}
	for _, e := range g.Env {
		if slices.Contains(r.Env, e) || r.Credentials[e] != (credref.Ref{}) {
			t.Errorf("rule %q: github_app env %s is also passed or a credential", r.Name, e)
		}
	}
}

// CredentialBackends names each backend the allow rules' credentials and
// git credentials use, once; a deny rule's binary names none.
func TestCredentialBackends(t *testing.T) {
	p, err := policy.Parse("p.yaml", []byte(`version: 1
commands:
  - name: git
    binary: /usr/bin/git
    args: ["**"]
    network: proxied
    git_credentials:
      - {host: git.example.com, password: "file:a"}
  - name: sh
    binary: /bin/sh
    args: ["**"]
    credentials: {A: "vault:secret/a#b", B: "file:c"}
  - name: ls
    binary: /bin/ls
`))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := p.CredentialBackends(), []string{"file", "vault"}; !slices.Equal(got, want) {
		t.Fatalf("CredentialBackends() = %v, want %v", got, want)
	}
}

// A section key no linked package registered is an unknown key, as the
// decoder says of any other: a binary never loads a rule whose section it
// cannot honour. A registered key given twice is refused as a core key
// given twice is.
func TestSectionKeys(t *testing.T) {
	const rule = `version: 1
commands:
  - name: git
    binary: /usr/bin/git
    network: proxied
    git_credentials: [{host: git.example.com, password: "file:a"}]
`
	for _, c := range []struct {
		name, data, want string
		without          bool
	}{
		{"unregistered", rule, `p.yaml:6:5: field git_credentials not found in type policy.ruleFile`, true},
		{"twice", rule + "    git_credentials: [{host: git.example.com, password: \"file:b\"}]\n",
			`p.yaml:7:5: mapping key "git_credentials" already defined at line 6`, false},
		{"with other faults", "version: 1\ncommands:\n  - name: x\n    binary: /bin/true\n    gitcredentials: []\n    timeout: [1]\n    concurrency: x\n",
			`p.yaml:5:5: field gitcredentials not found in type policy.ruleFile; line 6: cannot unmarshal !!seq into string; line 7: cannot unmarshal !!str ` + "`x`" + ` into int`, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.without {
				policy.WithoutSections(t)
			}
			if _, err := policy.Parse("p.yaml", []byte(c.data)); err == nil || err.Error() != c.want {
				t.Errorf("Parse = %v\nwant %s", err, c.want)
			}
		})
	}
	if _, err := policy.Parse("p.yaml", []byte(rule)); err != nil {
		t.Errorf("with the section registered: %v", err)
	}
}
