package gitcredentials

import (
	"context"
	"slices"
	"strings"
	"testing"

	"coily.dev/coily/attach"
	"coily.dev/coily/audit"
	"coily.dev/coily/gitcred"
	"coily.dev/coily/policy"
	"coily.dev/coily/refusal"
	"coily.dev/coily/sandbox"
)

func rule(t testing.TB) *policy.Rule {
	t.Helper()
	p, err := policy.Parse("p.yaml", []byte(`version: 1
commands:
  - name: git
    binary: /usr/bin/git
    args: ["**"]
    network: proxied
    sandbox: bwrap
    git_credentials:
      - {host: "git.example.com:8443", password: "file:git"}
      - {host: ghe.example.com, username: bot, password: "file:ghe"}
`))
	if err != nil {
		t.Fatal(err)
	}
	return p.Rules()[0]
}

// The passwords are fetched under gitcred.PasswordVar and left in the
// values (the child's helper reads them); the command gets the helper's
// configuration; the audit record names hosts and references, never
// passwords.
func TestCredentials(t *testing.T) {
	c := New(rule(t))
	refs := c.Refs()
	if len(refs) != 2 || refs[gitcred.PasswordVar(0)].String() != "file:git" || refs[gitcred.PasswordVar(1)].String() != "file:ghe" {
		t.Fatalf("refs %v", refs)
	}
	vals := map[string]string{gitcred.PasswordVar(0): "git-secret-1", gitcred.PasswordVar(1): "ghe-secret-2"}
	taken, err := c.Take(context.Background(), vals)
	if err != nil || len(taken) != 0 || len(vals) != 2 {
		t.Fatalf("Take: %v, taken %d, %d values left", err, len(taken), len(vals))
	}
	run := &attach.Run{}
	if err := c.Prepare(context.Background(), run); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"COILY_GIT_CRED_0": "git.example.com:8443", "COILY_GIT_USER_0": "x-access-token",
		"COILY_GIT_CRED_1": "ghe.example.com:443", "COILY_GIT_USER_1": "bot",
		"GIT_CONFIG_COUNT": "3", "GIT_CONFIG_KEY_0": "credential.helper", "GIT_CONFIG_VALUE_0": "",
		"GIT_CONFIG_KEY_1": "credential.helper", "GIT_CONFIG_VALUE_1": sandbox.BridgePath + " __git-credential",
		"GIT_CONFIG_KEY_2": "credential.useHttpPath", "GIT_CONFIG_VALUE_2": "false",
	}
	if len(run.Env) != len(want) || len(run.Binds) != 0 {
		t.Errorf("env %v, binds %v", run.Env, run.Binds)
	}
	for k, v := range want {
		if run.Env[k] != v {
			t.Errorf("%s = %q, want %q", k, run.Env[k], v)
		}
	}
	var rec audit.Record
	c.Describe(&rec)
	if d := rec.Lists["git_credentials"]; !slices.Equal(d, []string{"git.example.com:8443=file:git", "ghe.example.com:443=file:ghe"}) {
		t.Errorf("git_credentials = %q", d)
	}
	c.Close(context.Background(), &attach.End{Record: &rec}) // refused: nothing was given
	if rec.CredentialsUsed != nil {
		t.Errorf("a refusal's record: %q", rec.CredentialsUsed)
	}
	// Used: the password whose host and port the egress proxy let the
	// command reach; not the other (its host refused, another port).
	rec.Egress = []audit.EgressRow{
		{Host: "GIT.example.com", Port: 8443, Decision: "allow", Conns: 2},
		{Host: "ghe.example.com", Port: 443, Decision: "deny", Conns: 1},
		{Host: "ghe.example.com", Port: 8443, Decision: "allow", Conns: 1},
	}
	c.Close(context.Background(), &attach.End{Record: &rec, Result: true})
	if !slices.Equal(rec.CredentialsUsed, []string{"git credential helper for https://git.example.com:8443 from file:git (its host reached: 2 connections)"}) {
		t.Errorf("credentials used: %q", rec.CredentialsUsed)
	}
	// Without an egress proxy nothing saw it: given, and said so.
	rec = audit.Record{}
	open := New(rule(t))
	open.proxied = false
	open.Close(context.Background(), &attach.End{Record: &rec, Result: true})
	if len(rec.CredentialsUsed) != 2 || !strings.HasSuffix(rec.CredentialsUsed[1], "(given; no egress proxy saw whether it was sent)") {
		t.Errorf("credentials used without a proxy: %q", rec.CredentialsUsed)
	}
	if New(&policy.Rule{}) != nil {
		t.Error("an attachment without git_credentials")
	}
}

// hostile are values that would add lines to git's credential answer,
// or give none.
var hostile = []string{"", "\n", "pass\nusername=evil", "pass\x00", "x\r\n\n", "\x00"}

// A value that is no usable password refuses the exec with
// credential-unavailable, naming the reference, not the value.
func TestTakeUnusable(t *testing.T) {
	c := New(rule(t))
	for _, v := range hostile {
		vals := map[string]string{gitcred.PasswordVar(0): "fine", gitcred.PasswordVar(1): v}
		_, err := c.Take(context.Background(), vals)
		if refusal.As(err).Code != refusal.CredentialUnavailable || !strings.Contains(err.Error(), "file:ghe") ||
			!strings.Contains(err.Error(), "ghe.example.com:443") || (len(v) > 1 && strings.Contains(err.Error(), v)) {
			t.Errorf("%q: %v", v, err)
		}
	}
	if _, err := c.Take(context.Background(), map[string]string{gitcred.PasswordVar(0): "fine"}); refusal.As(err).Code != refusal.CredentialUnavailable {
		t.Errorf("a missing password: %v", err)
	}
}

// Take accepts exactly the values the helper can send, and never quotes
// one it refuses.
func FuzzTake(f *testing.F) {
	for _, v := range append(hostile, "git-secret-1", "ghp_0123456789abcdefghij") {
		f.Add(v)
	}
	c := New(rule(f))
	f.Fuzz(func(t *testing.T, v string) {
		_, err := c.Take(context.Background(), map[string]string{gitcred.PasswordVar(0): v, gitcred.PasswordVar(1): "fine"})
		if (err == nil) != gitcred.ValidPassword(v) {
			t.Fatalf("%q: %v", v, err)
		}
		if err != nil && strings.ContainsAny(v, "\n\x00") && len(v) > 8 && strings.Contains(err.Error(), v) {
			t.Fatalf("the refusal quotes %q", v)
		}
	})
}
