package server

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"coily.dev/coily/attach"
	"coily.dev/coily/attach/cabundle"
	"coily.dev/coily/attach/gitcredentials"
	"coily.dev/coily/keystore"
	"coily.dev/coily/policy"
	coilyv1 "coily.dev/coily/proto/coily/v1"
	"coily.dev/coily/refusal"
	"coily.dev/coily/sandbox"
)

const testCA = `-----BEGIN CERTIFICATE-----
MIIBfzCCASWgAwIBAgIUQnoQ3E2xqk0i7p5J4o9pQ9e2JgAwCgYIKoZIzj0EAwIw
-----END CERTIFICATE-----
`

// gitRule is a proxied rule with a git credential and a CA bundle.
func gitRule(t *testing.T, body string) *policy.Rule {
	t.Helper()
	p, err := policy.Parse("p.yaml", []byte(`version: 1
commands:
  - name: git
    binary: /usr/bin/git
    args: ["**"]
    network: proxied
    sandbox: bwrap
`+body))
	if err != nil {
		t.Fatal(err)
	}
	return p.Rules()[0]
}

func credServer(t *testing.T, lines string) *Server {
	t.Helper()
	file := filepath.Join(t.TempDir(), "credentials")
	if err := os.WriteFile(file, []byte(lines), 0o600); err != nil {
		t.Fatal(err)
	}
	ks := keystore.New(keystore.Config{Backends: map[string]keystore.Backend{keystore.BackendFile: keystore.NewFile(file)}})
	return &Server{cfg: Config{Keystore: ks}, log: slog.New(slog.DiscardHandler)}
}

// The child of a git_credentials rule gets the helper's configuration,
// the addresses and user names, the passwords (redacted from output like
// any credential) and, with ca_file, the CA variables; nothing else
// changes what the caller passed.
func TestChildEnvGitCredentials(t *testing.T) {
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, []byte(testCA), 0o600); err != nil {
		t.Fatal(err)
	}
	r := gitRule(t, `    env: [GIT_AUTHOR_NAME]
    ca_file: `+caFile+`
    credentials: {GH_TOKEN: "file:gh"}
    git_credentials:
      - {host: "git.example.com:8443", password: "file:git"}
      - {host: ghe.example.com, username: bot, password: "file:ghe"}
`)
	s := credServer(t, "git=git-secret-1\nghe=ghe-secret-2\ngh=gh-secret-3\n")
	x := &execution{rule: r, req: &coilyv1.ExecRequest{Env: map[string]string{"GIT_AUTHOR_NAME": "a"}}}
	x.attached = s.attachmentsOf(x, policy.Decision{Rule: r})
	if err := s.fetchCredentials(context.Background(), x); err != nil {
		t.Fatal(err)
	}
	// The helper's configuration comes with the git credentials
	// (attach/gitcredentials), the CA variables with the bundle
	// (attach/cabundle); the proxy is tested on its own.
	x.run = &attach.Run{Scratch: t.TempDir()}
	for _, a := range x.attached {
		switch a.(type) {
		case *gitcredentials.Creds, *cabundle.Bundle:
			if err := a.Prepare(context.Background(), x.run); err != nil {
				t.Fatal(err)
			}
			defer a.Close(context.Background(), &attach.End{})
		}
	}
	env := x.childEnv()
	want := map[string]string{
		"GIT_AUTHOR_NAME": "a", "GH_TOKEN": "gh-secret-3",
		"COILY_GIT_CRED_0": "git.example.com:8443", "COILY_GIT_USER_0": "x-access-token", "COILY_GIT_PASS_0": "git-secret-1",
		"COILY_GIT_CRED_1": "ghe.example.com:443", "COILY_GIT_USER_1": "bot", "COILY_GIT_PASS_1": "ghe-secret-2",
		"GIT_CONFIG_COUNT": "3", "GIT_CONFIG_KEY_0": "credential.helper", "GIT_CONFIG_VALUE_0": "",
		"GIT_CONFIG_KEY_1": "credential.helper", "GIT_CONFIG_VALUE_1": sandbox.BridgePath + " __git-credential",
		"GIT_CONFIG_KEY_2": "credential.useHttpPath", "GIT_CONFIG_VALUE_2": "false",
	}
	for _, k := range sandbox.CAEnv {
		want[k] = sandbox.CAPath
	}
	if len(env) != len(want) {
		t.Errorf("child env has %d variables, want %d", len(env), len(want))
	}
	for k, v := range want {
		if env[k] != v {
			t.Errorf("%s = %q, want %q", k, env[k], v)
		}
	}
	out := x.scrub.Redact([]byte("git-secret-1 ghe-secret-2"))
	if string(out) != "[REDACTED:COILY_GIT_PASS_0] [REDACTED:COILY_GIT_PASS_1]" {
		t.Errorf("git passwords are not redacted: %s", out)
	}
	if d := x.auditRecord("exec.result").Lists["git_credentials"]; !slices.Equal(d, []string{"git.example.com:8443=file:git", "ghe.example.com:443=file:ghe"}) {
		t.Errorf("audit details git_credentials = %q", d)
	}
}

// A value that would add lines to git's credential answer refuses the
// exec before anything runs, naming the reference, not the value.
func TestGitCredentialUnusableValue(t *testing.T) {
	r := gitRule(t, "    git_credentials: [{host: git.example.com, password: \"file:git\"}]\n")
	for _, file := range []string{"git=\n", "other=x\n"} {
		s := credServer(t, file)
		x := &execution{rule: r, req: &coilyv1.ExecRequest{}}
		x.attached = s.attachmentsOf(x, policy.Decision{Rule: r})
		err := s.fetchCredentials(context.Background(), x)
		if refusal.As(err).Code != refusal.CredentialUnavailable || !strings.Contains(err.Error(), "file:git") {
			t.Errorf("%q: %v", file, err)
		}
	}
}
