package server_test

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"coily.dev/coily/audit"
	"coily.dev/coily/internal/benchstat"
	"coily.dev/coily/internal/standin"
	"coily.dev/coily/internal/testlog"
	"coily.dev/coily/internal/testserver"
	"coily.dev/coily/keystore"
	coilyv1 "coily.dev/coily/proto/coily/v1"
	"coily.dev/coily/refusal"
)

// appServer starts a server whose rules mint installation tokens of the
// stand-in's App; the file keystore holds the App's key (base64 on one
// line) under ghapp and garbage under broken.
func appServer(t *testing.T, g *standin.GitHub, app *standin.App, log io.Writer) *testserver.Instance {
	t.Helper()
	credFile := filepath.Join(t.TempDir(), "credentials")
	lines := "ghapp=" + base64.StdEncoding.EncodeToString(app.PEM) + "\nbroken=not-a-key-at-all\n"
	if err := os.WriteFile(credFile, []byte(lines), 0o600); err != nil {
		t.Fatal(err)
	}
	ks := keystore.New(keystore.Config{Backends: map[string]keystore.Backend{keystore.BackendFile: keystore.NewFile(credFile)}})
	app1 := fmt.Sprintf(`{app_id: %d, installation_id: %d, api_url: "%s/api/v3", permissions: {issues: write}, repository_from: --repo, env: GH_TOKEN`,
		app.ID, app.Installation, g.URL)
	return testserver.Start(t, testserver.Options{Keystore: ks, Log: log, Policy: `version: 1
roles: {operator: {permissions: [exec], commands: ["*"]}}
commands:
  - name: sh
    binary: /bin/sh
    args: ["*"]
    flags: {-c: true, --repo: "alice/*"}
    ca_file: ` + g.CAFile + `
    github_app: ` + app1 + `, private_key: "file:ghapp"}
  - name: broken-key
    binary: /bin/true
    flags: {--repo: "alice/*"}
    ca_file: ` + g.CAFile + `
    github_app: ` + app1 + `, private_key: "file:broken"}
  - name: unreachable
    binary: /bin/false
    flags: {--repo: "alice/*"}
    github_app: {app_id: 1, installation_id: 2, api_url: "https://127.0.0.1:1/api/v3", permissions: {issues: write}, repository_from: --repo, env: GH_TOKEN, private_key: "file:ghapp"}
`})
}

// appExec runs one Exec in cwd and returns the output, every byte the
// server sent, and the refusal.
func appExec(t *testing.T, in *testserver.Instance, cwd string, argv ...string) (string, []byte, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	st, err := in.Client.API.Exec(ctx, &coilyv1.ExecRequest{Argv: argv, Cwd: cwd})
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	var wire []byte
	for {
		m, rerr := st.Recv()
		if rerr != nil {
			if errors.Is(rerr, io.EOF) {
				return out.String(), wire, nil
			}
			sp, _ := proto.Marshal(status.Convert(rerr).Proto())
			return out.String(), append(wire, sp...), refusal.FromStatus(rerr)
		}
		b, _ := proto.Marshal(m)
		wire = append(wire, b...)
		if o := m.GetOutput(); o != nil {
			out.Write(o.GetData())
		}
	}
}

func newApp(t *testing.T, extra map[string]string) (*standin.GitHub, *standin.App) {
	g := standin.GitHubEnterprise(t, "user-token-"+strings.Repeat("u", 20))
	return g, g.InstallApp(t, standin.AppOptions{ID: 42, Installation: 4242, Owner: "alice", Repos: []string{"repo", "other"},
		Permissions: map[string]string{"issues": "write", "contents": "write"}, GrantExtra: extra})
}

// One exec, one token: of the repository --repo names alone, with the
// rule's permissions, in the child's GH_TOKEN only (redacted from the
// output), revoked when the command ends; the audit record says when it
// would have expired and what it could do, never its value; the App's
// key appears nowhere.
func TestGitHubAppTokenPerExec(t *testing.T) {
	requireBwrap(t)
	g, app := newApp(t, nil)
	var log testlog.Buffer
	in := appServer(t, g, app, &log)
	script := `case "$GH_TOKEN" in ghs_*) echo "token $GH_TOKEN";; *) echo no token; exit 1;; esac; env | grep -c COILY_GITHUB || true`
	var tokens []string
	var wires [][]byte
	for range 2 {
		out, wire, err := appExec(t, in, "", "/bin/sh", "-c", script, "--repo", "alice/repo")
		if err != nil {
			t.Fatalf("exec: %v", err)
		}
		if out != "token [REDACTED:GH_TOKEN]\n0\n" {
			t.Fatalf("output %q", out)
		}
		reqs := g.TokenRequests()
		last := reqs[len(reqs)-1]
		if last.Status != 201 || len(last.Repositories) != 1 || last.Repositories[0] != "repo" || len(last.Permissions) != 1 || last.Permissions["issues"] != "write" {
			t.Fatalf("coily asked for %+v, want repository repo alone with issues: write", last)
		}
		if skew := time.Since(last.IssuedAt); skew < 55*time.Second || skew > 70*time.Second || last.Expires.Sub(last.IssuedAt) > 10*time.Minute {
			t.Errorf("JWT iat %v, exp %v", last.IssuedAt, last.Expires)
		}
		tok, _ := g.InstallationToken(last.Token)
		if !tok.Revoked || tok.Repo != "alice/repo" {
			t.Fatalf("token after the exec: %+v (revoked %v)", tok.Repo, tok.Revoked)
		}
		tokens, wires = append(tokens, last.Token), append(wires, wire)
	}
	if tokens[0] == tokens[1] {
		t.Fatal("two execs shared a token")
	}
	rec := in.WaitAudit(t, func(r audit.Record) bool { return r.Event == "exec.result" })
	d := rec.Details
	if d["github_app_repository"] != "alice/repo" || d["github_app_permissions"] != "issues:write" ||
		d["github_app_token_permissions"] != "issues:write,metadata:read" || d["github_app_revoked"] != "true" ||
		!strings.HasPrefix(d["github_app"], "app 42 installation 4242 key file:ghapp api https://127.0.0.1:") {
		t.Errorf("audit details %v", d)
	}
	if exp, err := time.Parse(time.RFC3339, d["github_app_token_expires"]); err != nil || time.Until(exp) > time.Hour || time.Until(exp) < 50*time.Minute {
		t.Errorf("github_app_token_expires %q", d["github_app_token_expires"])
	}
	in.Stop()
	secrets := append([]string{string(app.PEM), base64.StdEncoding.EncodeToString(app.PEM)}, tokens...)
	auditData := auditBytes(t, in)
	for _, s := range secrets {
		leakCheck(t, "audit log", auditData, s)
		leakCheck(t, "server log", log.Bytes(), s)
		for _, w := range wires {
			leakCheck(t, "gRPC response", w, s)
		}
	}
}

func auditBytes(t *testing.T, in *testserver.Instance) []byte {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(in.StateDir, "audit", "*.jsonl"))
	var data []byte
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		data = append(data, b...)
	}
	if len(data) == 0 {
		t.Fatal("no audit log")
	}
	return data
}

// Whatever goes wrong with the token refuses the exec with
// credential-unavailable and the cause, and nothing runs; a token minted
// and then refused (wider than asked), or minted for an exec refused
// later, is revoked.
func TestGitHubAppTokenFailsClosed(t *testing.T) {
	requireBwrap(t)
	g, app := newApp(t, nil)
	in := appServer(t, g, app, io.Discard)
	marker := filepath.Join(t.TempDir(), "ran")
	run := "touch " + marker
	for name, tc := range map[string]struct {
		argv []string
		cwd  string
		code refusal.Code
		msg  string
	}{
		"repository not installed": {[]string{"/bin/sh", "-c", run, "--repo", "alice/secret"}, "", refusal.CredentialUnavailable,
			"GitHub refused the token: 422 \"There is at least one repository that does not exist or is not accessible to the parent installation.\""},
		"no repository": {[]string{"/bin/sh", "-c", run}, "", refusal.PolicyDeny, "github_app takes the repository from --repo, which is not given"},
		"two different": {[]string{"/bin/sh", "-c", run, "--repo", "alice/repo", "--repo", "alice/other"}, "", refusal.PolicyDeny, "different repositories"},
		"broken key":    {[]string{"/bin/true", "--repo", "alice/repo"}, "", refusal.CredentialUnavailable, "credential file:broken: not usable as a GitHub App private key"},
		"unreachable":   {[]string{"/bin/false", "--repo", "alice/repo"}, "", refusal.CredentialUnavailable, "GitHub API unreachable"},
		"refused later": {[]string{"/bin/sh", "-c", run, "--repo", "alice/repo"}, "no/such/dir", "", ""},
	} {
		t.Run(name, func(t *testing.T) {
			before := len(g.TokenRequests())
			_, _, err := appExec(t, in, tc.cwd, tc.argv...)
			if err == nil {
				t.Fatal("the exec ran")
			}
			if tc.code != "" {
				wantCode(t, err, tc.code)
				if msg := refusal.As(err).Msg; !strings.Contains(msg, tc.msg) {
					t.Errorf("message %q lacks %q", msg, tc.msg)
				}
			}
			if _, err := os.Stat(marker); err == nil {
				t.Fatal("the command ran")
			}
			for _, r := range g.TokenRequests()[before:] {
				if tok, ok := g.InstallationToken(r.Token); ok && !tok.Revoked {
					t.Errorf("token for %s left alive", tok.Repo)
				}
			}
			if name == "refused later" {
				rec := in.WaitAudit(t, func(r audit.Record) bool { return r.Details["github_app_revoked"] == "true" && r.Decision == "refuse" })
				if len(g.TokenRequests()) != before+1 || rec.Details["github_app_repository"] != "alice/repo" {
					t.Errorf("record %+v", rec.Details)
				}
			}
		})
	}
}

// A GitHub that grants more than asked: coily revokes the token at once
// and refuses the exec; the command never sees it.
func TestGitHubAppTokenWiderRefused(t *testing.T) {
	requireBwrap(t)
	g, app := newApp(t, map[string]string{"contents": "write"})
	in := appServer(t, g, app, io.Discard)
	_, _, err := appExec(t, in, "", "/bin/sh", "-c", "true", "--repo", "alice/repo")
	wantCode(t, err, refusal.CredentialUnavailable)
	if msg := refusal.As(err).Msg; !strings.Contains(msg, "carries permissions not asked for (\"contents:write\"); it was revoked") {
		t.Errorf("message %q", msg)
	}
	reqs := g.TokenRequests()
	if len(reqs) != 1 {
		t.Fatalf("%d token requests", len(reqs))
	}
	if tok, _ := g.InstallationToken(reqs[0].Token); !tok.Revoked {
		t.Error("the wider token was not revoked")
	}
}

// BenchmarkExecGitHubApp measures an Exec of /bin/true (bwrap) whose rule
// mints a GitHub App installation token (the key from the file keystore,
// the JWT signed, the token asked for over TLS from the stand-in and its
// answer checked, revoked after), against the same Exec with one file
// credential, interleaved in the same run.
// Run: go test -run '^$' -bench ExecGitHubApp -benchtime 200x ./server/
func BenchmarkExecGitHubApp(b *testing.B) {
	if _, err := exec.LookPath("bwrap"); err != nil {
		b.Skip("bwrap:", err)
	}
	g := standin.GitHubEnterprise(b, "user-token-"+strings.Repeat("u", 20))
	app := g.InstallApp(b, standin.AppOptions{ID: 42, Installation: 4242, Owner: "alice", Repos: []string{"repo"},
		Permissions: map[string]string{"issues": "write"}})
	credFile := filepath.Join(b.TempDir(), "credentials")
	lines := "ghapp=" + base64.StdEncoding.EncodeToString(app.PEM) + "\ntoken=ghp_" + strings.Repeat("z3", 18) + "\n"
	if err := os.WriteFile(credFile, []byte(lines), 0o600); err != nil {
		b.Fatal(err)
	}
	ks := keystore.New(keystore.Config{Backends: map[string]keystore.Backend{keystore.BackendFile: keystore.NewFile(credFile)}, CacheTTL: -1})
	in := testserver.Start(b, testserver.Options{Keystore: ks, Policy: fmt.Sprintf(`version: 1
roles: {operator: {permissions: [exec], commands: ["*"]}}
commands:
  - name: app
    binary: /bin/true
    args: [app]
    ca_file: %s
    github_app: {app_id: 42, installation_id: 4242, api_url: "%s/api/v3", permissions: {issues: write}, repository: alice/repo, env: GH_TOKEN, private_key: "file:ghapp"}
  - {name: static, binary: /bin/true, args: [static], ca_file: %[1]s, credentials: {GH_TOKEN: "file:token"}}
`, g.CAFile, g.URL)})
	ctx := context.Background()
	run := func(arg string) time.Duration {
		t0 := time.Now()
		if _, err := in.Client.Exec(ctx, &coilyv1.ExecRequest{Argv: []string{"/bin/true", arg}}, io.Discard, io.Discard); err != nil {
			b.Fatal(err)
		}
		return time.Since(t0)
	}
	run("app")
	run("static")
	var minted, static []time.Duration
	b.ResetTimer()
	for range b.N {
		minted = append(minted, run("app"))
		static = append(static, run("static"))
	}
	b.StopTimer()
	benchstat.Report(b, "app", minted)
	benchstat.Report(b, "static", static)
	b.ReportMetric(benchstat.Ratio(minted, static, 50), "app/static-p50")
	if n := len(g.TokenRequests()); n != b.N+1 {
		b.Fatalf("%d tokens minted for %d execs", n, b.N+1)
	}
}
