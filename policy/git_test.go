package policy_test

import (
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"coily.dev/coily/keystore/credref"
	"coily.dev/coily/policy"
)

const gitPolicy = `version: 1
roles:
  agent: {permissions: [exec]}
grants:
  - {principals: ["tag:agent"], roles: [agent]}
git:
  remotes:
    - name: app
      url: https://github.com/alice/*
      roles: [agent]
      credential: file:github-token
      push:
        refs: ["refs/heads/agent/*"]
        create: allow
        fast_forward: allow
        force: confirm
        confirm_timeout: 2m
    - name: lab
      url: https://git.example.com:8443/team/tools.git
      roles: [agent]
      ca_file: /etc/coily/lab-ca.pem
      allow_cidrs: [10.0.0.0/8]
      fetch: false
    - name: box
      url: ssh://git@git.example.com/team/*.git
      roles: [agent]
      ssh_key: vault:secret/coily/deploy#private_key
      known_hosts: ["git.example.com,[git.example.com]:2222 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAII7eomUANJifizYzousLFbgRW73rm76Zzk9iqzZCKCvm"]
    - name: box2222
      url: ssh://u_1.x-y@git.example.com:2222/srv/app
      roles: [agent]
      ssh_key: file:deploy
      known_hosts: ["[git.example.com]:2222 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAII7eomUANJifizYzousLFbgRW73rm76Zzk9iqzZCKCvm"]
`

// An ssh remote: its url, user, key and pins; requested by its host
// alone on port 22 (as coily git setup rewrites git@HOST:), with its port
// otherwise.
func TestGitSectionSSH(t *testing.T) {
	p, err := policy.Parse("git.yaml", []byte(gitPolicy))
	if err != nil {
		t.Fatal(err)
	}
	box := p.GitRemote("git.example.com", 443, "team/web")
	if box == nil || box.Name != "box" || box.Port != 22 || box.SSH == nil || box.SSH.User != "git" ||
		box.SSH.Key != (credref.Ref{Backend: "vault", Path: "secret/coily/deploy", Field: "private_key"}) || len(box.SSH.KnownHosts) != 1 {
		t.Fatalf("box = %+v", box)
	}
	if got := box.URL("team/web.git"); got != "ssh://git@git.example.com/team/web.git" {
		t.Errorf("URL = %s", got)
	}
	if got := p.GitRemote("git.example.com", 22, "team/web"); got != box {
		t.Errorf("port 22 named: %+v", got)
	}
	other := p.GitRemote("git.example.com", 2222, "srv/app")
	if other == nil || other.Name != "box2222" || other.URL("srv/app") != "ssh://u_1.x-y@git.example.com:2222/srv/app" {
		t.Fatalf("box2222 = %+v", other)
	}
	if got := p.GitRemote("git.example.com", 443, "srv/app"); got != nil {
		t.Errorf("an ssh remote on 2222 was named without its port: %+v", got)
	}
	if got := p.GitRemote("git.example.com", 8443, "team/web"); got != nil {
		t.Errorf("an ssh remote on 22 was named by another port: %+v", got)
	}
	if app := p.GitRemote("github.com", 443, "alice/web"); app.SSH != nil || app.URL("alice/web") != "https://github.com/alice/web" {
		t.Errorf("an https remote reads as ssh: %+v", app)
	}
}

func TestGitSection(t *testing.T) {
	p, err := policy.Parse("git.yaml", []byte(gitPolicy))
	if err != nil {
		t.Fatal(err)
	}
	app := p.GitRemote("github.com", 443, "alice/web.git")
	if app == nil || app.Name != "app" || !app.Fetch || app.Credential != (credref.Ref{Backend: "file", Path: "github-token"}) {
		t.Fatalf("app = %+v", app)
	}
	if app.URL("alice/web.git") != "https://github.com/alice/web.git" {
		t.Errorf("URL = %s", app.URL("alice/web.git"))
	}
	if got := p.GitRemote("github.com", 443, "alice/web/extra"); got != nil {
		t.Errorf("a pattern's * crossed a /: %+v", got)
	}
	if got := p.GitRemote("github.com", 443, "bob/web"); got != nil {
		t.Errorf("another owner matched: %+v", got)
	}
	if got := p.GitRemote("github.com", 8443, "alice/web"); got != nil {
		t.Errorf("another port matched: %+v", got)
	}
	lab := p.GitRemote("git.example.com", 8443, "team/tools")
	if lab == nil || lab.Fetch || lab.Push != nil || lab.CAFile != "/etc/coily/lab-ca.pem" ||
		!slices.Equal(lab.AllowCIDRs, []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}) {
		t.Fatalf("lab = %+v", lab)
	}
	if lab.URL("team/tools") != "https://git.example.com:8443/team/tools" {
		t.Errorf("URL = %s", lab.URL("team/tools"))
	}
	if app.Push.ConfirmTimeout != 2*time.Minute {
		t.Errorf("confirm_timeout = %s", app.Push.ConfirmTimeout)
	}
	for _, c := range []struct {
		ref  string
		kind policy.GitKind
		want policy.GitDecision
	}{
		{"refs/heads/agent/x", policy.GitCreate, policy.GitAllow},
		{"refs/heads/agent/x", policy.GitFastForward, policy.GitAllow},
		{"refs/heads/agent/x", policy.GitForce, policy.GitConfirm},
		{"refs/heads/agent/x", policy.GitDelete, policy.GitDeny}, // not named: deny
		{"refs/heads/agent/x", policy.GitTag, policy.GitDeny},
		{"refs/heads/main", policy.GitFastForward, policy.GitDeny},
		{"refs/heads/agent/x/y", policy.GitCreate, policy.GitDeny}, // * stays in one segment
		{"refs/heads/agent", policy.GitCreate, policy.GitDeny},
	} {
		if got := app.Push.Decide(c.ref, c.kind); got != c.want {
			t.Errorf("Decide(%s, %s) = %s, want %s", c.ref, c.kind, got, c.want)
		}
	}
	agent := policy.Subject{Principal: "tag:agent"}
	if !p.MayUseRemote(agent, app) || p.MayUseRemote(policy.Subject{Principal: "tag:other"}, app) {
		t.Error("MayUseRemote does not follow the grants")
	}
	var none *policy.GitPush
	if none.Decide("refs/heads/agent/x", policy.GitCreate) != policy.GitDeny {
		t.Error("no push block allowed a push")
	}
}

// hostileGitSections are git sections the parser refuses, each with a
// part of its message.
var hostileGitSections = []struct{ name, section, want string }{
	{"empty", "git: {}", "at least one remote"},
	{"unknown key", "git:\n  remotes:\n    - {name: a, url: https://h.example/o/r, roles: [agent], token: x}", "token"},
	{"http", "git:\n  remotes:\n    - {name: a, url: http://h.example/o/r, roles: [agent]}", "or ssh (ssh://git@HOST/OWNER/REPO) only"},
	{"user in url", "git:\n  remotes:\n    - {name: a, url: https://u@h.example/o/r, roles: [agent]}", "without user"},
	{"wildcard host", "git:\n  remotes:\n    - {name: a, url: https://*.h.example/o/r, roles: [agent]}", "wildcard"},
	{"ip literal", "git:\n  remotes:\n    - {name: a, url: https://10.0.0.1/o/r, roles: [agent]}", "allow_cidrs"},
	{"no path", "git:\n  remotes:\n    - {name: a, url: https://h.example/, roles: [agent]}", "repository path"},
	{"dotdot", "git:\n  remotes:\n    - {name: a, url: https://h.example/o/../r, roles: [agent]}", "segment"},
	{"dot", "git:\n  remotes:\n    - {name: a, url: https://h.example/./r, roles: [agent]}", "segment"},
	{"empty segment", "git:\n  remotes:\n    - {name: a, url: https://h.example/o//r, roles: [agent]}", "segment"},
	{"encoded", "git:\n  remotes:\n    - {name: a, url: https://h.example/o/%2e%2e, roles: [agent]}", "segment"},
	{"backslash", "git:\n  remotes:\n    - {name: a, url: 'https://h.example/o\\r', roles: [agent]}", "segment"},
	{"query", "git:\n  remotes:\n    - {name: a, url: 'https://h.example/o/r?x=1&y', roles: [agent]}", "segment"},
	{"bad glob", "git:\n  remotes:\n    - {name: a, url: 'https://h.example/o/[', roles: [agent]}", "segment"},
	{"no roles", "git:\n  remotes:\n    - {name: a, url: https://h.example/o/r}", "roles"},
	{"unknown role", "git:\n  remotes:\n    - {name: a, url: https://h.example/o/r, roles: [ghost]}", "no role named"},
	{"bad name", "git:\n  remotes:\n    - {name: A B, url: https://h.example/o/r, roles: [agent]}", "must match"},
	{"twice", "git:\n  remotes:\n    - {name: a, url: https://h.example/o/r, roles: [agent]}\n    - {name: a, url: https://h.example/o/s, roles: [agent]}", "named twice"},
	{"bad credential", "git:\n  remotes:\n    - {name: a, url: https://h.example/o/r, roles: [agent], credential: 'nope'}", "credential"},
	{"relative ca", "git:\n  remotes:\n    - {name: a, url: https://h.example/o/r, roles: [agent], ca_file: ca.pem}", "ca_file"},
	{"cidr host bits", "git:\n  remotes:\n    - {name: a, url: https://h.example/o/r, roles: [agent], allow_cidrs: [10.0.0.1/8]}", "host bits"},
	{"cidr with a port", "git:\n  remotes:\n    - {name: a, url: https://h.example/o/r, roles: [agent], allow_cidrs: [\"10.0.0.0/8:443\"]}", "take no port"},
	{"push no refs", "git:\n  remotes:\n    - {name: a, url: https://h.example/o/r, roles: [agent], push: {create: allow}}", "push needs refs"},
	{"ref outside refs", "git:\n  remotes:\n    - {name: a, url: https://h.example/o/r, roles: [agent], push: {refs: [heads/x]}}", "ref pattern"},
	{"ref dotdot", "git:\n  remotes:\n    - {name: a, url: https://h.example/o/r, roles: [agent], push: {refs: [refs/heads/../x]}}", "ref pattern"},
	{"ref space", "git:\n  remotes:\n    - {name: a, url: https://h.example/o/r, roles: [agent], push: {refs: ['refs/heads/a b']}}", "ref pattern"},
	{"bad decision", "git:\n  remotes:\n    - {name: a, url: https://h.example/o/r, roles: [agent], push: {refs: [refs/heads/*], force: yes}}", "allow, confirm or deny"},
	{"bad timeout", "git:\n  remotes:\n    - {name: a, url: https://h.example/o/r, roles: [agent], push: {refs: [refs/heads/*], confirm_timeout: forever}}", "confirm_timeout"},
	{"ssh scp-like", "git:\n  remotes:\n    - {name: a, url: git@h.example:o/r, roles: [agent]}", "scp-like form is not read"},
	{"ssh no user", "git:\n  remotes:\n    - {name: a, url: ssh://h.example/o/r, roles: [agent]}", "name the ssh user"},
	{"ssh option user", "git:\n  remotes:\n    - {name: a, url: 'ssh://-oProxyCommand=x@h.example/o/r', roles: [agent]}", "ssh user"},
	{"ssh quote user", "git:\n  remotes:\n    - {name: a, url: \"ssh://a'b@h.example/o/r\", roles: [agent]}", "ssh user"},
	{"ssh empty user", "git:\n  remotes:\n    - {name: a, url: ssh://@h.example/o/r, roles: [agent]}", "ssh user"},
	{"ssh option host", "git:\n  remotes:\n    - {name: a, url: ssh://git@-oProxyCommand=x/o/r, roles: [agent]}", "oProxyCommand"},
	{"ssh two at", "git:\n  remotes:\n    - {name: a, url: ssh://a@b@h.example/o/r, roles: [agent]}", "without wildcard"},
	{"ssh ip literal", "git:\n  remotes:\n    - {name: a, url: ssh://git@10.0.0.1/o/r, roles: [agent]}", "allow_cidrs"},
	{"ssh ipv6 literal", "git:\n  remotes:\n    - {name: a, url: 'ssh://git@[::1]/o/r', roles: [agent]}", "allow_cidrs"},
	{"ssh bad port", "git:\n  remotes:\n    - {name: a, url: ssh://git@h.example:0/o/r, roles: [agent]}", "port"},
	{"ssh no path", "git:\n  remotes:\n    - {name: a, url: ssh://git@h.example/, roles: [agent]}", "repository path"},
	{"ssh dotdot", "git:\n  remotes:\n    - {name: a, url: ssh://git@h.example/o/../r, roles: [agent]}", "segment"},
	{"ssh tilde", "git:\n  remotes:\n    - {name: a, url: ssh://git@h.example/~alice/r, roles: [agent]}", "segment"},
	{"ssh option path", "git:\n  remotes:\n    - {name: a, url: ssh://git@h.example/-oProxyCommand=x, roles: [agent]}", "segment"},
	{"ssh no key", "git:\n  remotes:\n    - {name: a, url: ssh://git@h.example/o/r, roles: [agent], known_hosts: ['h.example ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAII7eomUANJifizYzousLFbgRW73rm76Zzk9iqzZCKCvm']}", "needs ssh_key"},
	{"ssh pasted key", "git:\n  remotes:\n    - {name: a, url: ssh://git@h.example/o/r, roles: [agent], ssh_key: '-----BEGIN OPENSSH PRIVATE KEY-----', known_hosts: ['h.example ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAII7eomUANJifizYzousLFbgRW73rm76Zzk9iqzZCKCvm']}", "this is a private key"},
	{"ssh bad key ref", "git:\n  remotes:\n    - {name: a, url: ssh://git@h.example/o/r, roles: [agent], ssh_key: nope, known_hosts: ['h.example ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAII7eomUANJifizYzousLFbgRW73rm76Zzk9iqzZCKCvm']}", "ssh_key"},
	{"ssh no pin", "git:\n  remotes:\n    - {name: a, url: ssh://git@h.example/o/r, roles: [agent], ssh_key: file:k}", "needs known_hosts"},
	{"ssh empty pins", "git:\n  remotes:\n    - {name: a, url: ssh://git@h.example/o/r, roles: [agent], ssh_key: file:k, known_hosts: []}", "needs known_hosts"},
	{"ssh pin of another host", "git:\n  remotes:\n    - {name: a, url: ssh://git@h.example:2222/o/r, roles: [agent], ssh_key: file:k, known_hosts: ['h.example ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAII7eomUANJifizYzousLFbgRW73rm76Zzk9iqzZCKCvm']}", "does not name the remote's host [h.example]:2222"},
	{"ssh hashed pin", "git:\n  remotes:\n    - {name: a, url: ssh://git@h.example/o/r, roles: [agent], ssh_key: file:k, known_hosts: ['|1|abc= ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAII7eomUANJifizYzousLFbgRW73rm76Zzk9iqzZCKCvm']}", "hashed"},
	{"ssh wildcard pin", "git:\n  remotes:\n    - {name: a, url: ssh://git@h.example/o/r, roles: [agent], ssh_key: file:k, known_hosts: ['*.example ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAII7eomUANJifizYzousLFbgRW73rm76Zzk9iqzZCKCvm']}", "patterns"},
	{"ssh cert authority pin", "git:\n  remotes:\n    - {name: a, url: ssh://git@h.example/o/r, roles: [agent], ssh_key: file:k, known_hosts: ['@cert-authority h.example ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAII7eomUANJifizYzousLFbgRW73rm76Zzk9iqzZCKCvm']}", "marker"},
	{"ssh pin twice", "git:\n  remotes:\n    - {name: a, url: ssh://git@h.example/o/r, roles: [agent], ssh_key: file:k, known_hosts: ['h.example ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAII7eomUANJifizYzousLFbgRW73rm76Zzk9iqzZCKCvm', 'h.example,g.example ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAII7eomUANJifizYzousLFbgRW73rm76Zzk9iqzZCKCvm']}", "repeats a key"},
	{"ssh credential", "git:\n  remotes:\n    - {name: a, url: ssh://git@h.example/o/r, roles: [agent], credential: file:t, ssh_key: file:k, known_hosts: ['h.example ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAII7eomUANJifizYzousLFbgRW73rm76Zzk9iqzZCKCvm']}", "credential is for an https remote"},
	{"ssh ca_file", "git:\n  remotes:\n    - {name: a, url: ssh://git@h.example/o/r, roles: [agent], ca_file: /etc/ca.pem, ssh_key: file:k, known_hosts: ['h.example ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAII7eomUANJifizYzousLFbgRW73rm76Zzk9iqzZCKCvm']}", "ca_file is for an https remote"},
	{"ssh github_app", "git:\n  remotes:\n    - {name: a, url: ssh://git@github.com/o/r, roles: [agent], github_app: {app_id: 1, installation_id: 2, private_key: file:k}, ssh_key: file:k, known_hosts: ['github.com ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAII7eomUANJifizYzousLFbgRW73rm76Zzk9iqzZCKCvm']}", "ssh remote authenticates with ssh_key, not a GitHub App"},
	{"https ssh_key", "git:\n  remotes:\n    - {name: a, url: https://h.example/o/r, roles: [agent], ssh_key: file:k}", "ssh_key is for an ssh remote"},
	{"https known_hosts", "git:\n  remotes:\n    - {name: a, url: https://h.example/o/r, roles: [agent], known_hosts: ['h.example ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAII7eomUANJifizYzousLFbgRW73rm76Zzk9iqzZCKCvm']}", "known_hosts is for an ssh remote"},
	{"app and credential", "git:\n  remotes:\n    - {name: a, url: https://github.com/o/r, roles: [agent], credential: file:t, github_app: {app_id: 1, installation_id: 2, private_key: file:k}}", "not both"},
	{"app id zero", "git:\n  remotes:\n    - {name: a, url: https://github.com/o/r, roles: [agent], github_app: {app_id: 0, installation_id: 2, private_key: file:k}}", "app_id"},
	{"app id words", "git:\n  remotes:\n    - {name: a, url: https://github.com/o/r, roles: [agent], github_app: {app_id: 'x y', installation_id: 2, private_key: file:k}}", "app_id"},
	{"app id too large", "git:\n  remotes:\n    - {name: a, url: https://github.com/o/r, roles: [agent], github_app: {app_id: 9007199254740993, installation_id: 2, private_key: file:k}}", "app_id"},
	{"app no installation", "git:\n  remotes:\n    - {name: a, url: https://github.com/o/r, roles: [agent], github_app: {app_id: 1, private_key: file:k}}", "installation_id"},
	{"app installation negative", "git:\n  remotes:\n    - {name: a, url: https://github.com/o/r, roles: [agent], github_app: {app_id: 1, installation_id: -2, private_key: file:k}}", "installation_id"},
	{"app pasted key", "git:\n  remotes:\n    - {name: a, url: https://github.com/o/r, roles: [agent], github_app: {app_id: 1, installation_id: 2, private_key: '-----BEGIN RSA PRIVATE KEY-----'}}", "not a reference"},
	{"app bad key ref", "git:\n  remotes:\n    - {name: a, url: https://github.com/o/r, roles: [agent], github_app: {app_id: 1, installation_id: 2, private_key: nope}}", "private_key"},
	{"app http api", "git:\n  remotes:\n    - {name: a, url: https://github.com/o/r, roles: [agent], github_app: {app_id: 1, installation_id: 2, private_key: file:k, api_url: 'http://api.github.com'}}", "https"},
	{"app api of another host", "git:\n  remotes:\n    - {name: a, url: https://github.com/o/r, roles: [agent], github_app: {app_id: 1, installation_id: 2, private_key: file:k, api_url: 'https://evil.example/api/v3'}}", "not on the remote's host"},
	{"app unknown key", "git:\n  remotes:\n    - {name: a, url: https://github.com/o/r, roles: [agent], github_app: {app_id: 1, installation_id: 2, private_key: file:k, permissions: {contents: write}}}", "permissions"},
	{"app deep path", "git:\n  remotes:\n    - {name: a, url: https://github.com/g/s/r, roles: [agent], github_app: {app_id: 1, installation_id: 2, private_key: file:k}}", "OWNER/NAME"},
	{"duplicate key", "git:\n  remotes:\n    - name: a\n      name: b\n      url: https://h.example/o/r\n      roles: [agent]", "already defined"},
}

func TestGitSectionHostile(t *testing.T) {
	for _, c := range hostileGitSections {
		t.Run(c.name, func(t *testing.T) {
			data := "version: 1\nroles:\n  agent: {permissions: [exec]}\n" + c.section + "\n"
			_, err := policy.Parse("git.yaml", []byte(data))
			var e *policy.Error
			if !errors.As(err, &e) {
				t.Fatalf("Parse = %v, want a *policy.Error", err)
			}
			if !strings.Contains(err.Error(), c.want) || e.Line < 4 {
				t.Errorf("error %q: want %q at a line of the git section", err, c.want)
			}
		})
	}
}

func FuzzGitSection(f *testing.F) {
	f.Add(gitPolicy)
	for _, c := range hostileGitSections {
		f.Add("version: 1\nroles:\n  agent: {permissions: [exec]}\n" + c.section + "\n")
	}
	f.Fuzz(func(t *testing.T, data string) {
		p, err := policy.Parse("fuzz.yaml", []byte(data))
		if err != nil {
			return
		}
		for _, r := range p.GitRemotes() {
			if r.Host == "" || r.Port <= 0 || r.Path == "" || dotSegment(r.Path) || len(r.Roles) == 0 {
				t.Fatalf("accepted remote %+v", r)
			}
			if got := p.GitRemote(r.Host, r.Port, r.Path); got == nil {
				t.Fatalf("remote %q does not match its own pattern", r.Name)
			}
			if r.SSH != nil && (r.SSH.User == "" || strings.HasPrefix(r.SSH.User, "-") || r.SSH.Key == (credref.Ref{}) ||
				len(r.SSH.KnownHosts) == 0 || r.Credential != (credref.Ref{}) || r.CAFile != "") {
				t.Fatalf("accepted ssh remote %+v", r)
			}
			for _, k := range sshPins(r) {
				if !slices.Contains(k.Hosts, r.SSHHost()) {
					t.Fatalf("remote %q pins %s for another host", r.Name, k)
				}
			}
			if r.GitHubApp != nil && r.SSH != nil {
				t.Fatalf("accepted github_app on ssh remote %+v", r)
			}
			if r.GitHubApp != nil && (r.Credential != (credref.Ref{}) || strings.Count(r.Path, "/") != 1 || r.GitHubApp.InstallationID < 1) {
				t.Fatalf("accepted github_app remote %+v", r)
			}
			if r.Push.Decide("refs/heads/main", policy.GitKind("other")) != policy.GitDeny {
				t.Fatal("an unknown kind was not denied")
			}
		}
	})
}

func sshPins(r *policy.GitRemote) []policy.KnownHost {
	if r.SSH == nil {
		return nil
	}
	return r.SSH.KnownHosts
}

// GitHub and most hosts read a repository path without regard to case:
// a request that spells a repository another way must not reach it under
// a broader remote than the one that names it.
func TestGitRemoteCaseVariants(t *testing.T) {
	p, err := policy.Parse("git.yaml", []byte(`version: 1
roles:
  agent: {permissions: [exec]}
  admin: {permissions: [exec]}
grants:
  - {principals: ["tag:agent"], roles: [agent]}
git:
  remotes:
    - name: secret
      url: https://github.com/alice/secret
      roles: [admin]
    - name: rest
      url: https://github.com/alice/*
      roles: [agent]
    - name: bob
      url: https://github.com/Bob/*
      roles: [agent]
`))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		repo, want string
	}{
		{"alice/secret", "secret"},
		{"alice/secret.git", "secret"},
		{"alice/web", "rest"},
		{"alice/Web.git", "rest"},
		{"Bob/tools", "bob"},
		{"alice/Secret", ""},
		{"alice/SECRET.git", ""},
		{"alice/secret.GIT", ""},
		{"Alice/secret", ""},
		{"bob/tools", ""},
		{"alice/.git", ""},
		{"alice/.GIT", ""},
	} {
		got := p.GitRemote("github.com", 443, c.repo)
		if name := func() string {
			if got == nil {
				return ""
			}
			return got.Name
		}(); name != c.want {
			t.Errorf("GitRemote(%q) = %q, want %q", c.repo, name, c.want)
		}
	}
}

// dotSegment reports whether a path has a segment "." or ".." (a name
// that merely starts with dots, "..Cr", is a name).
func dotSegment(path string) bool {
	for _, seg := range strings.Split(path, "/") {
		if seg == "." || seg == ".." {
			return true
		}
	}
	return false
}

// A remote's github_app: its App, installation, key reference and API
// (github.com's when it names none).
func TestGitRemoteGitHubApp(t *testing.T) {
	p, err := policy.Parse("git.yaml", []byte(`version: 1
roles:
  agent: {permissions: [exec]}
git:
  remotes:
    - name: app
      url: https://github.com/alice/*
      roles: [agent]
      github_app: {app_id: 123456, installation_id: 7890, private_key: "vault:secret/coily/ghapp#private_key"}
    - name: ghe
      url: https://ghe.example.com/team/tools
      roles: [agent]
      github_app: {app_id: Iv1.abc, installation_id: 3, private_key: file:ghe-key, api_url: https://ghe.example.com/api/v3}
`))
	if err != nil {
		t.Fatal(err)
	}
	app := p.GitRemote("github.com", 443, "alice/web")
	if got := app.GitHubApp.Summary(); got != "app 123456 installation 7890 key vault:secret/coily/ghapp#private_key api https://api.github.com" {
		t.Errorf("app: %s", got)
	}
	if app.Credential != (credref.Ref{}) {
		t.Errorf("app has a credential: %+v", app.Credential)
	}
	ghe := p.GitRemote("ghe.example.com", 443, "team/tools")
	if got := ghe.GitHubApp.Summary(); got != "app Iv1.abc installation 3 key file:ghe-key api https://ghe.example.com/api/v3" {
		t.Errorf("ghe: %s", got)
	}
}
