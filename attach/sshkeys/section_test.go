package sshkeys_test

import (
	"flag"
	"os"
	"reflect"
	"strings"
	"testing"

	"coily.dev/coily/attach/sshkeys"
	"coily.dev/coily/internal/policytest"
	"coily.dev/coily/keystore/credref"
	"coily.dev/coily/policy"
)

func TestLoadSSHKeys(t *testing.T) {
	p, err := policy.Load("testdata/ssh-keys.yaml")
	if err != nil {
		t.Fatal(err)
	}
	r := p.Rules()[0]
	want := []sshkeys.SSHKey{
		{Key: credref.Ref{Backend: credref.Vault, Path: "secret/coily/deploy", Field: "private_key"},
			Hosts: []policy.SSHHost{{Host: "github.com", Port: 22}}},
		{Key: credref.Ref{Backend: credref.Keychain, Path: "coily", Field: "ghe-deploy"},
			Hosts: []policy.SSHHost{{Host: "git.example.com", Port: 2222}, {Host: "10.0.0.1", Port: 7999}}},
	}
	if !reflect.DeepEqual(sshkeys.Of(r), want) {
		t.Fatalf("SSHKeys = %+v\nwant %+v", sshkeys.Of(r), want)
	}
	if got := sshkeys.Of(r)[1].HostList(); got != "[git.example.com]:2222,[10.0.0.1]:7999" {
		t.Errorf("HostList = %q", got)
	}
	// Each key's pins are those of its hosts: the agent signs with the
	// first key only for sessions with the ed25519 key, with the second
	// only for the ECDSA key (pinned once for both of its hosts).
	for i, wantType := range []string{"ssh-ed25519", "ecdsa-sha2-nistp256"} {
		pins := sshkeys.Pins(r, sshkeys.Of(r)[i])
		if len(pins) != 1 || pins[0].KeyType != wantType {
			t.Errorf("key %d: pins %+v, want one %s key", i, pins, wantType)
			continue
		}
		if pub, err := pins[0].PublicKey(); err != nil || pub.Type() != wantType {
			t.Errorf("key %d: public key %v, %v", i, pub, err)
		}
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

// The rule of docs/credentials.md's git over ssh recipe loads as written
// (TestCLIExecGitOverSSH runs the same setup end to end).
func TestCredentialsRecipeGitOverSSH(t *testing.T) {
	doc, err := os.ReadFile("../../docs/credentials.md")
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
	if keys := sshkeys.Of(r); len(keys) != 1 || keys[0].Key.String() != "vault:secret/coily/deploy#private_key" || keys[0].HostList() != "github.com" {
		t.Fatalf("recipe rule %+v", keys)
	}
}

// edKey is an ed25519 host key (the policy tests' knownhosts fixture).
const edKey = "AAAAC3NzaC1lZDI1NTE5AAAAIHc/ZoQpu+kbUW14vnzWUqdg3h7xYZiIeekiNxXkELZs"

var update = flag.Bool("update", false, "rewrite the golden files in testdata/broken")

// The broken policies of ssh_keys fail with the errors of their golden
// files.
func TestLoadBroken(t *testing.T) {
	policytest.Broken(t, "testdata/broken", *update, nil, nil)
}

// FuzzParse parses policies seeded from this package's: what loads has
// ssh keys only on proxied bwrap rules, at most MaxSSHKeys, each host
// under one key, pinned and reachable.
func FuzzParse(f *testing.F) {
	policytest.Fuzz(f, []string{"testdata", "testdata/broken"}, func(t *testing.T, p *policy.Policy) {
		for _, r := range p.Rules() {
			keys := sshkeys.Of(r)
			if len(keys) > 0 && (r.Effect != policy.Allow || r.Network != policy.NetworkProxied || r.Sandbox != policy.SandboxBwrap || len(keys) > sshkeys.MaxSSHKeys) {
				t.Fatalf("rule %q: %d ssh_keys with effect %v, network %q, sandbox %q", r.Name, len(keys), r.Effect, r.Network, r.Sandbox)
			}
			hosts := map[policy.SSHHost]bool{}
			for _, k := range keys {
				for _, h := range k.Hosts {
					if hosts[h] || len(r.Egress.PinsFor(h)) == 0 || !r.Egress.ReachesSSH(h) {
						t.Fatalf("rule %q: ssh key %s: host %s twice, unpinned or unreachable", r.Name, k.Key, h)
					}
					hosts[h] = true
				}
				if k.Key.Backend == "" || len(k.Hosts) == 0 || len(sshkeys.Pins(r, k)) == 0 {
					t.Fatalf("rule %q: ssh key %+v", r.Name, k)
				}
			}
		}
	})
}
