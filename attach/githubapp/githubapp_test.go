package githubapp

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"coily.dev/coily/attach"
	"coily.dev/coily/audit"
	"coily.dev/coily/internal/standin"
	"coily.dev/coily/policy"
	"coily.dev/coily/refusal"
)

// appRule is a rule whose github_app is the stand-in's App, the
// repository taken from --repo.
func appRule(t *testing.T, g *standin.GitHub, app *standin.App) *policy.Rule {
	t.Helper()
	p, err := policy.Parse("p.yaml", []byte(fmt.Sprintf(`version: 1
commands:
  - name: gh
    binary: /bin/true
    flags: {--repo: "alice/*"}
    ca_file: %s
    github_app: {app_id: %d, installation_id: %d, api_url: "%s/api/v3", permissions: {issues: write}, repository_from: --repo, env: [GH_TOKEN, GITHUB_TOKEN], private_key: "file:ghapp"}
`, g.CAFile, app.ID, app.Installation, g.URL)))
	if err != nil {
		t.Fatal(err)
	}
	return p.Rules()[0]
}

func newApp(t *testing.T) (*standin.GitHub, *standin.App) {
	g := standin.GitHubEnterprise(t, "user-token-"+strings.Repeat("u", 20))
	return g, g.InstallApp(t, standin.AppOptions{ID: 42, Installation: 4242, Owner: "alice", Repos: []string{"repo"},
		Permissions: map[string]string{"issues": "write"}})
}

// The App's key is taken out of the values (the child's environment) and
// returned to be redacted; the token minted with it, for the repository
// the arguments name, goes under each of the rule's variables; the audit
// record names the App, the repository and the permissions, never the
// token; closing revokes the token once and says so.
func TestTakeMintsAndCloseRevokes(t *testing.T) {
	g, app := newApp(t)
	r := appRule(t, g, app)
	tok := New(r, []string{"--repo", "alice/repo"}, slog.New(slog.DiscardHandler))
	if refs := tok.Refs(); len(refs) != 1 || refs[KeyVar].String() != "file:ghapp" {
		t.Fatalf("refs %v", refs)
	}
	vals := map[string]string{KeyVar: string(app.PEM), "OTHER": "x"}
	taken, err := tok.Take(context.Background(), vals)
	if err != nil {
		t.Fatal(err)
	}
	if len(taken) != 1 || taken[0].Name != KeyVar || taken[0].Value != string(app.PEM) {
		t.Errorf("taken %v", taken)
	}
	if _, ok := vals[KeyVar]; ok || len(vals) != 3 || !strings.HasPrefix(vals["GH_TOKEN"], "ghs_") || vals["GITHUB_TOKEN"] != vals["GH_TOKEN"] {
		t.Fatalf("values after Take: %d, GH_TOKEN %t", len(vals), strings.HasPrefix(vals["GH_TOKEN"], "ghs_"))
	}
	var rec audit.Record
	tok.Describe(&rec)
	d := rec.Details
	if d["github_app_repository"] != "alice/repo" || d["github_app_permissions"] != "issues:write" ||
		d["github_app_token_permissions"] != "issues:write,metadata:read" || d["github_app_token_expires"] == "" ||
		!strings.HasPrefix(d["github_app"], "app 42 installation 4242 key file:ghapp api https://127.0.0.1:") {
		t.Errorf("details %v", d)
	}
	if err := tok.Prepare(context.Background(), &attach.Run{}); err != nil {
		t.Fatal(err)
	}
	end := attach.End{Record: &audit.Record{}}
	tok.Close(context.Background(), &end)
	tok.Close(context.Background(), &end) // once
	if got, _ := g.InstallationToken(vals["GH_TOKEN"]); !got.Revoked || got.Repo != "alice/repo" {
		t.Errorf("token after Close: revoked %v, repository %s", got.Revoked, got.Repo)
	}
	if end.Record.Details["github_app_revoked"] != "true" {
		t.Errorf("end details %v", end.Record.Details)
	}
	for _, v := range []string{vals["GH_TOKEN"], string(app.PEM)} {
		for k, dv := range d {
			if strings.Contains(dv, v) {
				t.Errorf("detail %s holds a secret", k)
			}
		}
	}
}

// A value that is no usable key refuses with credential-unavailable,
// naming the reference, never the value; nothing is minted and the key
// is still returned, to be redacted. So does an API that cannot be
// reached, with the cause.
func TestTakeFailsClosed(t *testing.T) {
	g, app := newApp(t)
	r := appRule(t, g, app)
	for name, value := range map[string]string{"garbage": "not-a-key-at-all", "empty": ""} {
		tok := New(r, []string{"--repo", "alice/repo"}, slog.New(slog.DiscardHandler))
		vals := map[string]string{KeyVar: value}
		taken, err := tok.Take(context.Background(), vals)
		if refusal.As(err).Code != refusal.CredentialUnavailable || !strings.Contains(err.Error(), "file:ghapp") ||
			(value != "" && strings.Contains(err.Error(), value)) {
			t.Errorf("%s: %v", name, err)
		}
		if len(vals) != 0 || len(taken) != 1 {
			t.Errorf("%s: values %d, taken %d", name, len(vals), len(taken))
		}
	}
	if n := len(g.TokenRequests()); n != 0 {
		t.Errorf("%d tokens asked for with no usable key", n)
	}
	Of(r).API.Host = "127.0.0.1:1"
	tok := New(r, []string{"--repo", "alice/repo"}, slog.New(slog.DiscardHandler))
	_, err := tok.Take(context.Background(), map[string]string{KeyVar: string(app.PEM)})
	if refusal.As(err).Code != refusal.CredentialUnavailable || !strings.Contains(err.Error(), "installation token for alice/repo") {
		t.Errorf("unreachable API: %v", err)
	}
	end := attach.End{Record: &audit.Record{}}
	tok.Close(context.Background(), &end)
	if len(end.Record.Details) != 0 {
		t.Errorf("closing an unminted token wrote %v", end.Record.Details)
	}
}

// A rule without github_app has no such attachment.
func TestNewWithoutApp(t *testing.T) {
	if New(&policy.Rule{}, nil, slog.Default()) != nil {
		t.Error("an attachment without github_app")
	}
}
