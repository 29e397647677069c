package policy_test

import (
	"os"
	"reflect"
	"strings"
	"testing"

	"coily.dev/coily/keystore/credref"
	"coily.dev/coily/policy"
)

func TestLoadSSHKeys(t *testing.T) {
	p, err := policy.Load("testdata/valid/ssh-keys.yaml")
	if err != nil {
		t.Fatal(err)
	}
	r := p.Rules()[0]
	want := []policy.SSHKey{
		{Key: credref.Ref{Backend: credref.Vault, Path: "secret/coily/deploy", Field: "private_key"},
			Hosts: []policy.SSHHost{{Host: "github.com", Port: 22}}},
		{Key: credref.Ref{Backend: credref.Keychain, Path: "coily", Field: "ghe-deploy"},
			Hosts: []policy.SSHHost{{Host: "git.example.com", Port: 2222}, {Host: "10.0.0.1", Port: 7999}}},
	}
	if !reflect.DeepEqual(r.SSHKeys, want) {
		t.Fatalf("SSHKeys = %+v\nwant %+v", r.SSHKeys, want)
	}
	if got := r.SSHKeys[1].HostList(); got != "[git.example.com]:2222,[10.0.0.1]:7999" {
		t.Errorf("HostList = %q", got)
	}
	// Each key's pins are those of its hosts: the agent signs with the
	// first key only for sessions with the ed25519 key, with the second
	// only for the ECDSA key (pinned once for both of its hosts).
	for i, wantType := range []string{"ssh-ed25519", "ecdsa-sha2-nistp256"} {
		pins := r.SSHKeyPins(r.SSHKeys[i])
		if len(pins) != 1 || pins[0].KeyType != wantType {
			t.Errorf("key %d: pins %+v, want one %s key", i, pins, wantType)
			continue
		}
		if pub, err := pins[0].PublicKey(); err != nil || pub.Type() != wantType {
			t.Errorf("key %d: public key %v, %v", i, pub, err)
		}
	}
}

// Reaching a pinned host: a name through the allowlist (its port), an
// address through allow_cidrs, anything in observe mode, nothing without
// an egress block.
func TestReachesSSH(t *testing.T) {
	e := &policy.Egress{Mode: policy.EgressEnforce}
	p, err := policy.Parse("p.yaml", []byte(`version: 1
commands:
  - name: git
    binary: /usr/bin/git
    network: proxied
    egress:
      allow: ["github.com:22", "*.example.com:2222"]
      allow_cidrs: [10.0.0.0/8]
`))
	if err != nil {
		t.Fatal(err)
	}
	eg := p.Rules()[0].Egress
	for _, c := range []struct {
		host policy.SSHHost
		want bool
	}{
		{policy.SSHHost{Host: "github.com", Port: 22}, true},
		{policy.SSHHost{Host: "github.com", Port: 2222}, false},
		{policy.SSHHost{Host: "git.example.com", Port: 2222}, true},
		{policy.SSHHost{Host: "example.com", Port: 2222}, false},
		{policy.SSHHost{Host: "10.1.2.3", Port: 7999}, true},
		{policy.SSHHost{Host: "192.0.2.1", Port: 22}, false},
		{policy.SSHHost{Host: "::ffff:10.0.0.1", Port: 22}, true},
	} {
		if got := eg.ReachesSSH(c.host); got != c.want {
			t.Errorf("ReachesSSH(%s) = %v, want %v", c.host, got, c.want)
		}
		if e.ReachesSSH(c.host) {
			t.Errorf("an empty enforced block reaches %s", c.host)
		}
		if !(&policy.Egress{Mode: policy.EgressObserve}).ReachesSSH(c.host) {
			t.Errorf("observe mode does not reach %s", c.host)
		}
	}
	if (*policy.Egress)(nil).ReachesSSH(policy.SSHHost{Host: "github.com", Port: 22}) {
		t.Error("no egress block reaches a host")
	}
}

// A private key pasted where its reference belongs is refused without
// being echoed.
func TestSSHKeyPastedIsNotEchoed(t *testing.T) {
	const secret = "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQ"
	for _, v := range []string{
		"\"-----BEGIN OPENSSH PRIVATE KEY-----\\n" + secret + "\\n-----END OPENSSH PRIVATE KEY-----\\n\"",
		"\"" + secret + "\\n\"",
		"\"PRIVATE KEY" + secret + "\"",
	} {
		_, err := policy.Parse("p.yaml", []byte(`version: 1
commands:
  - name: git
    binary: /usr/bin/git
    network: proxied
    egress:
      allow: ["github.com:22"]
      ssh_known_hosts: ["github.com ssh-ed25519 `+edKey+`"]
    ssh_keys:
      - {key: `+v+`, hosts: [github.com]}
`))
		if err == nil || strings.Contains(err.Error(), secret) || !strings.Contains(err.Error(), "not a reference") {
			t.Errorf("%s: error %v", v, err)
		}
	}
}

// checkSSHKeys asserts what a loaded rule's ssh_keys guarantee: a proxied
// bwrap rule; each key once, with a reference and 1 to 16 hosts; each
// host under one key only, pinned and reachable.
func checkSSHKeys(t testing.TB, r *policy.Rule) {
	t.Helper()
	if len(r.SSHKeys) == 0 {
		return
	}
	if r.Network != policy.NetworkProxied || r.Sandbox != policy.SandboxBwrap || len(r.SSHKeys) > policy.MaxSSHKeys {
		t.Errorf("rule %q: %d ssh_keys with network %q, sandbox %q", r.Name, len(r.SSHKeys), r.Network, r.Sandbox)
	}
	keys, hosts := map[credref.Ref]bool{}, map[policy.SSHHost]bool{}
	for _, k := range r.SSHKeys {
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
		if len(r.SSHKeyPins(k)) == 0 {
			t.Errorf("rule %q: ssh key %s has no pinned host key", r.Name, k.Key)
		}
	}
}

// The rule of docs/credentials.md's git over ssh recipe loads as written
// (TestCLIExecGitOverSSH runs the same setup end to end).
func TestCredentialsRecipeGitOverSSH(t *testing.T) {
	doc, err := os.ReadFile("../docs/credentials.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "### git over ssh\n")
	if !ok {
		t.Fatal("docs/credentials.md has no git over ssh recipe")
	}
	_, block, ok := strings.Cut(section, "```yaml\n")
	block, _, ok2 := strings.Cut(block, "```")
	if !ok || !ok2 {
		t.Fatal("the recipe has no yaml block")
	}
	var lines []string
	for _, l := range strings.Split(block, "\n") {
		lines = append(lines, strings.TrimPrefix(l, "   "))
	}
	p, err := policy.Parse("recipe.yaml", []byte("version: 1\n"+strings.Join(lines, "\n")))
	if err != nil {
		t.Fatal(err)
	}
	r := p.Rules()[0]
	if len(r.SSHKeys) != 1 || r.SSHKeys[0].Key.String() != "vault:secret/coily/deploy#private_key" || r.SSHKeys[0].HostList() != "github.com" {
		t.Fatalf("recipe rule %+v", r.SSHKeys)
	}
}
