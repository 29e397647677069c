package gitcredentials_test

import (
	"flag"
	"reflect"
	"slices"
	"testing"

	"coily.dev/coily/attach/gitcredentials"
	"coily.dev/coily/internal/policytest"
	"coily.dev/coily/keystore/credref"
	"coily.dev/coily/policy"
)

func TestLoadGitCredentials(t *testing.T) {
	p, err := policy.Load("testdata/git.yaml")
	if err != nil {
		t.Fatal(err)
	}
	r := p.Rules()[0]
	want := []gitcredentials.GitCredential{
		{Host: "git.example.com", Port: 443, Username: "x-access-token", Password: credref.Ref{Backend: credref.Vault, Path: "secret/coily/git", Field: "token"}},
		{Host: "ghe.example.com", Port: 8443, Username: "bot@example.com", Password: credref.Ref{Backend: credref.File, Path: "ghe"}},
	}
	if !reflect.DeepEqual(gitcredentials.Of(r), want) {
		t.Fatalf("GitCredentials = %+v\nwant %+v", gitcredentials.Of(r), want)
	}
	if r.CAFile != "/etc/coily/ca.pem" {
		t.Fatalf("CAFile = %q", r.CAFile)
	}
	if u := gitcredentials.Unreachable(r); len(u) != 0 {
		t.Fatalf("every host is in the allowlist, yet unreachable: %v", u)
	}
}

// A git_credentials host the enforced allowlist leaves out is reported
// (coily policy check warns): git could not reach it; observe mode
// reaches every host.
func TestGitCredentialsUnreachable(t *testing.T) {
	for _, c := range []struct {
		egress string
		want   []string
	}{
		{"", []string{"git.example.com:443", "ghe.example.com:8443"}},
		{"egress: {allow: [git.example.com]}", []string{"ghe.example.com:8443"}},
		{"egress: {allow: [\"git.example.com:80\", \"ghe.example.com:8443\"]}", []string{"git.example.com:443"}},
		{"egress: {allow: [\"*.example.com:8443\", \"git.example.com:443\"]}", nil},
		{"egress: {mode: observe}", nil},
	} {
		p, err := policy.Parse("p.yaml", []byte(`version: 1
commands:
  - name: git
    binary: /usr/bin/git
    args: ["**"]
    network: proxied
    `+c.egress+`
    git_credentials:
      - {host: git.example.com, password: "file:a"}
      - {host: "ghe.example.com:8443", password: "file:b"}
`))
		if err != nil {
			t.Fatal(err)
		}
		if got := gitcredentials.Unreachable(p.Rules()[0]); !slices.Equal(got, c.want) {
			t.Errorf("%s: unreachable %v, want %v", c.egress, got, c.want)
		}
	}
}

var update = flag.Bool("update", false, "rewrite the golden files in testdata/broken")

// The broken policies of git_credentials fail with the errors of their
// golden files.
func TestLoadBroken(t *testing.T) {
	policytest.Broken(t, "testdata/broken", *update, nil, nil)
}

// FuzzParse parses policies seeded from this package's: what loads has
// git credentials only on proxied bwrap rules, each an exact host once,
// with a port, a user name and a reference.
func FuzzParse(f *testing.F) {
	policytest.Fuzz(f, []string{"testdata", "testdata/broken"}, func(t *testing.T, p *policy.Policy) {
		for _, r := range p.Rules() {
			creds := gitcredentials.Of(r)
			if len(creds) > 0 && (r.Effect != policy.Allow || r.Network != policy.NetworkProxied || r.Sandbox != policy.SandboxBwrap) {
				t.Fatalf("rule %q: git_credentials with effect %v, network %q, sandbox %q", r.Name, r.Effect, r.Network, r.Sandbox)
			}
			seen := map[string]bool{}
			for _, g := range creds {
				if g.Host == "" || g.Port < 1 || g.Port > 65535 || seen[g.Address()] || g.Username == "" || g.Password.Backend == "" {
					t.Fatalf("rule %q: git credential %+v", r.Name, g)
				}
				seen[g.Address()] = true
			}
		}
	})
}
