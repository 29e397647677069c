package sshkeys

import (
	"context"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"coily.dev/coily/attach"
	"coily.dev/coily/audit"
	"coily.dev/coily/internal/sshkeytest"
	"coily.dev/coily/policy"
	coilyv1 "coily.dev/coily/proto/coily/v1"
	"coily.dev/coily/refusal"
	"coily.dev/coily/sandbox"
)

func rule(t *testing.T) *policy.Rule {
	t.Helper()
	p, err := policy.Parse("p.yaml", []byte(`version: 1
commands:
  - name: git
    binary: /usr/bin/git
    args: ["**"]
    network: proxied
    sandbox: bwrap
    egress:
      allow: ["git.example.com:22", "other.example.com:22"]
      ssh_known_hosts:
        - git.example.com ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHc/ZoQpu+kbUW14vnzWUqdg3h7xYZiIeekiNxXkELZs
        - other.example.com ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHc/ZoQpu+kbUW14vnzWUqdg3h7xYZiIeekiNxXkELZs
    ssh_keys:
      - {key: "file:deploy", hosts: [git.example.com]}
`))
	if err != nil {
		t.Fatal(err)
	}
	return p.Rules()[0]
}

// A key is taken out of the values (the child's environment) and paired
// with the host keys pinned for its hosts; the audit record names its
// reference and hosts.
func TestTakeKeys(t *testing.T) {
	key, pub := sshkeytest.KeyPEM(t)
	r := rule(t)
	k := New(r)
	if refs := k.Refs(); len(refs) != 1 || refs[KeyVar(0)].String() != "file:deploy" {
		t.Fatalf("refs %v", refs)
	}
	vals := map[string]string{KeyVar(0): key, "GH_TOKEN": "x"}
	taken, err := k.Take(context.Background(), vals)
	if err != nil || len(taken) != 1 || taken[0].Value != key || len(vals) != 1 {
		t.Fatalf("take: %v %v, left %v", taken, err, vals)
	}
	if !k.Holds(pub) {
		t.Fatal("the signer is not the key's")
	}
	keys, err := agentKeys(r, k.signers)
	if err != nil || len(keys) != 1 || len(keys[0].HostKeys) != 1 || keys[0].Hosts != "git.example.com" {
		t.Fatalf("agent keys %+v, %v", keys, err)
	}
	if got := pinnedFor(r)["SHA256:hqvtsyY+9zLXCmFN1eJY3Rya8nzGse7iriFkbnGQC78"]; got != "git.example.com,other.example.com" {
		t.Errorf("pinnedFor = %q", got)
	}
	var rec audit.Record
	k.Describe(&rec)
	if d := rec.Lists["ssh_keys"]; !slices.Equal(d, []string{"file:deploy=git.example.com"}) {
		t.Errorf("audit ssh_keys = %q", d)
	}
	if _, err := New(r).Take(context.Background(), map[string]string{KeyVar(0): "not a key"}); refusal.As(err).Code != refusal.CredentialUnavailable {
		t.Errorf("a value that is no key: %v", err)
	}
}

// The agent listens where the sandbox binds it, SSH_AUTH_SOCK points
// there, and it needs the egress proxy's socket; Close ends it, removes
// its directory and reports into the result alone.
func TestAgentPrepareClose(t *testing.T) {
	key, _ := sshkeytest.KeyPEM(t)
	r := rule(t)
	scratch := t.TempDir()
	newRun := func() *attach.Run {
		return &attach.Run{ID: "id", Scratch: scratch, Log: slog.New(slog.DiscardHandler),
			PrivateDir: func() (string, error) { return os.MkdirTemp(scratch, "coily-exec-") },
			Give:       func(string) error { return nil }}
	}
	k := New(r)
	if _, err := k.Take(context.Background(), map[string]string{KeyVar(0): key}); err != nil {
		t.Fatal(err)
	}
	if err := k.Prepare(context.Background(), newRun()); refusal.As(err).Code != refusal.SandboxUnavailable {
		t.Fatalf("without the proxy's socket: %v", err)
	}
	run := newRun()
	run.Bind(sandbox.Bind{At: sandbox.ProxySocketPath, Path: filepath.Join(scratch, "proxy.sock")})
	if err := k.Prepare(context.Background(), run); err != nil {
		t.Fatal(err)
	}
	sock := run.Bound(sandbox.SSHAgentPath)
	if run.Env["SSH_AUTH_SOCK"] != sandbox.SSHAgentPath || sock == "" {
		t.Fatalf("env %v binds %v", run.Env, run.Binds)
	}
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	refused := audit.Record{}
	k.Close(context.Background(), &attach.End{Record: &refused})
	if _, err := os.Stat(filepath.Dir(sock)); !os.IsNotExist(err) {
		t.Fatalf("the agent's directory outlived Close: %v", err)
	}
	if refused.Details != nil {
		t.Errorf("a refusal's record got %v", refused.Details)
	}
	k2 := New(r)
	var rec audit.Record
	exit := &coilyv1.ExecExit{}
	k2.Close(context.Background(), &attach.End{Record: &rec, Result: true, Exit: exit})
	if rec.Details["ssh_agent_signed"] != "0" {
		t.Errorf("a result's record: %v", rec.Details)
	}
}
