package server

import (
	"context"
	"encoding/base64"
	"slices"
	"strings"
	"testing"

	"coily.dev/coily/attach"
	"coily.dev/coily/attach/sshkeys"
	"coily.dev/coily/internal/sshkeytest"
	"coily.dev/coily/policy"
	coilyv1 "coily.dev/coily/proto/coily/v1"
	"coily.dev/coily/refusal"
)

const sshRuleBody = `    credentials: {GH_TOKEN: "file:gh"}
    egress:
      allow: ["git.example.com:22", "other.example.com:22"]
      ssh_known_hosts:
        - git.example.com ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHc/ZoQpu+kbUW14vnzWUqdg3h7xYZiIeekiNxXkELZs
        - other.example.com ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHc/ZoQpu+kbUW14vnzWUqdg3h7xYZiIeekiNxXkELZs
    ssh_keys:
      - {key: "file:deploy", hosts: [git.example.com]}
`

// An ssh key is fetched with the rule's credentials, parsed, and kept out
// of the child's environment, which gets SSH_AUTH_SOCK instead; the key is
// redacted from output all the same, and the audit record names it.
func TestFetchSSHKeys(t *testing.T) {
	key, pub := sshkeytest.KeyPEM(t)
	r := gitRule(t, sshRuleBody)
	// The credentials file holds one line per value: the key in base64.
	s := credServer(t, "deploy="+base64.StdEncoding.EncodeToString([]byte(key))+"\ngh=gh-secret-3\n")
	x := &execution{rule: r, req: &coilyv1.ExecRequest{}}
	x.attached = s.attachmentsOf(x, policy.Decision{Rule: r})
	if err := s.fetchCredentials(context.Background(), x); err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(x.attached, func(a attach.Attachment) bool { _, ok := a.(*sshkeys.Keys); return ok })
	if i < 0 || !x.attached[i].(*sshkeys.Keys).Holds(pub) {
		t.Fatalf("the agent's keys do not hold %v", pub)
	}
	// The agent's socket and SSH_AUTH_SOCK come with it (attach/sshkeys).
	env := x.childEnv()
	if len(env) != 1 || env["GH_TOKEN"] != "gh-secret-3" {
		t.Fatalf("child env %v: want GH_TOKEN only", env)
	}
	if out := x.scrub.Redact([]byte(base64.StdEncoding.EncodeToString([]byte(key)))); strings.Contains(string(out), key[40:60]) {
		t.Errorf("the key is not redacted from output")
	}
	if d := x.auditRecord("exec.result").Lists["ssh_keys"]; !slices.Equal(d, []string{"file:deploy=git.example.com"}) {
		t.Errorf("audit details ssh_keys = %q", d)
	}
}

// A value that is no usable key refuses the exec with
// credential-unavailable, naming the reference and never the value.
func TestFetchSSHKeyUnusable(t *testing.T) {
	key, _ := sshkeytest.KeyPEM(t)
	r := gitRule(t, sshRuleBody)
	for name, value := range map[string]string{
		"public key":   "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHc/ZoQpu+kbUW14vnzWUqdg3h7xYZiIeekiNxXkELZs",
		"a token":      "ghp_0123456789abcdefghij",
		"cut key":      base64.StdEncoding.EncodeToString([]byte(key[:len(key)/2])),
		"missing line": "",
	} {
		lines := "gh=x\n"
		if value != "" {
			lines += "deploy=" + value + "\n"
		}
		s := credServer(t, lines)
		x := &execution{rule: r, req: &coilyv1.ExecRequest{}}
		x.attached = s.attachmentsOf(x, policy.Decision{Rule: r})
		err := s.fetchCredentials(context.Background(), x)
		if refusal.As(err).Code != refusal.CredentialUnavailable || !strings.Contains(err.Error(), "file:deploy") {
			t.Errorf("%s: %v", name, err)
		}
		if value != "" && strings.Contains(err.Error(), value) {
			t.Errorf("%s: the error quotes the value", name)
		}
	}
}
