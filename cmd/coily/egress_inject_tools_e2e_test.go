package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"coily.dev/coily/internal/canary"
	"coily.dev/coily/internal/standin"
)

// canaryMark starts every token these tests inject: the sandbox greps its
// files for it (the whole token never enters the sandbox, not even in a
// pattern).
const canaryMark = "coilyCanaryTok"

// injectToken is a fresh token for tool, starting with canaryMark.
func injectToken(tool string) string {
	return canaryMark + tool + strings.ToUpper(strconv.FormatInt(time.Now().UnixNano(), 36))
}

// injectRun is one exec of a `sh` rule whose egress block is egress (the
// credential `file:tok` is token), running script, then dumping what a
// leak would show: the environment, every process's environ and cmdline,
// and the files under /run/coily, the temp directories, $HOME and the
// workspace that hold canaryMark ("files=[]" when none).
type injectRun struct {
	dir   string
	p     *serveProc
	r     cliRun
	token string
}

func runInject(t *testing.T, token, caFile, egress, script string) *injectRun {
	t.Helper()
	requireBwrap(t)
	dir := shortDir(t)
	creds := filepath.Join(dir, "credentials")
	if err := os.WriteFile(creds, []byte("tok="+token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	pol := writePolicy(t, dir, fmt.Sprintf(`version: 1
roles: {operator: {permissions: [exec, status], commands: [sh]}}
commands:
  - name: sh
    binary: /bin/sh
    args: ["**"]
    flags: any
    network: proxied
    sandbox: bwrap
    timeout: 3m
    ca_file: %s
    egress:
%s`, caFile, egress))
	p := startServe(t, dir, pol, "--credentials-file", creds)
	probe := `
echo "--- env"; env
echo "--- environ"; for f in /proc/[0-9]*/environ; do tr '\0' '\n' < "$f" 2>/dev/null; done
echo "--- cmdline"; for f in /proc/[0-9]*/cmdline; do tr '\0' ' ' < "$f" 2>/dev/null; echo; done
echo "files=[$(grep -rl ` + canaryMark + ` /run/coily "$TMPDIR" /tmp "$HOME" . 2>/dev/null | head -5)]"
true`
	r := p.run(t, "exec", "--", "/bin/sh", "-c", script+probe)
	return &injectRun{dir: dir, p: p, r: r, token: token}
}

// check asserts the run succeeded with want in its output, that the
// sandbox never held the token (a placeholder in env, nothing redacted,
// no file holding it) and that the token is in no output, server log or
// audit record.
func (ir *injectRun) check(t *testing.T, env string, want ...string) {
	t.Helper()
	r := ir.r
	if r.code != 0 {
		t.Fatalf("exec: %+v\n%s", r, ir.p.log)
	}
	want = append(want, env+"=coily-placeholder-", "SSL_CERT_FILE=/run/coily/ca.pem", "\nfiles=[]\n")
	for _, w := range want {
		if !strings.Contains(r.stdout, w) {
			t.Errorf("the sandbox's output lacks %q:\n%s\nstderr:\n%s", w, r.stdout, r.stderr)
		}
	}
	if strings.Contains(r.stdout, "REDACTED") || strings.Contains(r.stderr, "REDACTED") {
		t.Errorf("the sandbox held the secret (its output was redacted):\n%s", r.stdout)
	}
	c := canary.New(t)
	c.AddString("the injected token", ir.token)
	c.CheckText("the exec's answer", r.stdout, r.stderr)
	c.CheckText("the server's log", ir.p.log.String())
	c.CheckText("the audit log", readAudit(t, ir.dir))
	recs := egressRecords(t, ir.dir)
	if len(recs) != 1 {
		t.Fatalf("%d exec.result records", len(recs))
	}
	var injected, refused int
	for _, q := range recs[0].EgressRequests {
		if q.Injected && q.Status < 400 {
			injected++
		}
		if q.Decision == "deny" && q.Status == 403 {
			refused++
		}
	}
	if injected == 0 || refused == 0 {
		t.Errorf("request rows %+v: want injected requests and refused ones", recs[0].EgressRequests)
	}
}

// The `git-https` preset: git clones and pushes over HTTPS with Basic
// auth (a credential helper handing it $GIT_TOKEN, the placeholder); the
// stand-in needs the token even to read. The placeholder in Basic to
// another host, or as the user name, is refused.
func TestCLIExecInjectGitHTTPS(t *testing.T) {
	_, err := exec.LookPath("curl")
	requireComponent(t, err == nil, "curl")
	token := injectToken("git")
	g := standin.GitHTTP(t, standin.GitOptions{Token: token, Repos: []string{"alice/app"}, AuthRead: true,
		Hosts: []string{"git.test", "other.example.test"}})
	egress := fmt.Sprintf(`      allow: ["git.test:%[1]s", "other.example.test:%[1]s"]
      allow_cidrs: [127.0.0.0/8]
      hosts: {git.test: [127.0.0.1], other.example.test: [127.0.0.1]}
      inspect: [other.example.test]
      inject:
        - {preset: git-https, credential: "file:tok", host: "git.test:%[1]s"}
`, g.Port)
	script := `export HOME=$(mktemp -d) GIT_TERMINAL_PROMPT=0
cd "$HOME"
helper='!f() { echo username=x-access-token; echo "password=$GIT_TOKEN"; }; f'
git -c credential.helper="$helper" clone -q https://git.test:` + g.Port + `/alice/app.git app 2>&1 && echo cloned=yes
cd app && echo hello > README && git add README &&
  git -c user.name=a -c user.email=a@example.test commit -qm one &&
  git -c credential.helper="$helper" push -q origin HEAD:refs/heads/main 2>&1 && echo "pushed=$(git rev-parse HEAD)"
echo "elsewhere=$(curl -sS -u "x-access-token:$GIT_TOKEN" https://other.example.test:` + g.Port + `/alice/app.git/info/refs?service=git-upload-pack)"
echo "asuser=$(curl -sS -u "$GIT_TOKEN:x" https://git.test:` + g.Port + `/alice/app.git/info/refs?service=git-upload-pack)"
cd "$HOME"`
	ir := runInject(t, token, g.CAFile, egress, script)
	head := g.Ref(t, "alice/app", "refs/heads/main")
	if head == "" {
		t.Errorf("nothing was pushed: %s", strings.Join(g.Requests(), "\n"))
	}
	ir.check(t, "GIT_TOKEN", "cloned=yes", "pushed="+head,
		"elsewhere=coily: a credential placeholder was sent in header Authorization to other.example.test",
		"asuser=coily: a credential placeholder was sent in header Authorization to git.test")
}

// The `pip` preset: pip installs from a private index whose URL carries
// the placeholder as its password (PIP_INDEX_URL user:$PIP_PASSWORD); pip
// sends it as Basic, which the proxy swaps for the index's host only.
func TestCLIExecInjectPip(t *testing.T) {
	_, err := exec.LookPath("curl")
	requireComponent(t, err == nil, "curl")
	py := standin.Python(t)
	token := injectToken("pip")
	idx := standin.PipIndex(t, standin.PipOptions{Password: token, Hosts: []string{"pypi.test", "other.example.test"}})
	egress := fmt.Sprintf(`      allow: ["pypi.test:%[1]s", "other.example.test:%[1]s"]
      allow_cidrs: [127.0.0.0/8]
      hosts: {pypi.test: [127.0.0.1], other.example.test: [127.0.0.1]}
      inspect: [other.example.test]
      inject:
        - {preset: pip, credential: "file:tok", host: "pypi.test:%[1]s", path: /}
`, idx.Port)
	script := `export HOME=$(mktemp -d) PIP_CONFIG_FILE=/dev/null PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1 PIP_NO_CACHE_DIR=1
export PIP_INDEX_URL="https://__token__:$PIP_PASSWORD@pypi.test:` + idx.Port + `/simple/"
` + py + ` -m pip install -q --only-binary=:all: --retries 0 --timeout 10 --target "$HOME/site" standin-pkg 2>&1 &&
  echo "imported=$(PYTHONPATH=$HOME/site ` + py + ` -c 'import standin_pkg; print(standin_pkg.NAME)')"
echo "elsewhere=$(curl -sS -u "__token__:$PIP_PASSWORD" https://other.example.test:` + idx.Port + `/simple/)"
echo "asuser=$(curl -sS -u "$PIP_PASSWORD:x" https://pypi.test:` + idx.Port + `/simple/)"
echo "inquery=$(curl -sS -u "__token__:$PIP_PASSWORD" "https://pypi.test:` + idx.Port + `/simple/?p=$PIP_PASSWORD")"`
	ir := runInject(t, token, idx.CAFile, egress, script)
	ir.check(t, "PIP_PASSWORD", "imported=standin-pkg",
		"elsewhere=coily: a credential placeholder was sent in header Authorization to other.example.test",
		"asuser=coily: a credential placeholder was sent in header Authorization to pypi.test",
		"inquery=coily: a credential placeholder was sent in the URL")
	if reqs := strings.Join(idx.Requests(), "\n"); !strings.Contains(reqs, "/files/") || strings.Contains(reqs, " 401") {
		t.Errorf("index requests:\n%s", reqs)
	}
}

// The `npm` preset: npm installs from a private registry (verdaccio behind
// TLS needing `Authorization: Bearer`) with the user config's
// `_authToken=${NPM_TOKEN}`, the placeholder, which the proxy swaps for
// the registry's host only.
func TestCLIExecInjectNpm(t *testing.T) {
	_, err := exec.LookPath("curl")
	requireComponent(t, err == nil, "curl")
	reg := standin.NpmRegistry(t, standin.DefaultNpmPackage)
	token := injectToken("npm")
	front := reg.TLS(t, token, "npm.test", "other.example.test")
	egress := fmt.Sprintf(`      allow: ["npm.test:%[1]s", "other.example.test:%[1]s"]
      allow_cidrs: [127.0.0.0/8]
      hosts: {npm.test: [127.0.0.1], other.example.test: [127.0.0.1]}
      inspect: [other.example.test]
      inject:
        - {preset: npm, credential: "file:tok", host: "npm.test:%[1]s"}
`, front.Port)
	registry := "https://npm.test:" + front.Port + "/"
	script := `export HOME=$(mktemp -d)
export npm_config_userconfig=$HOME/npmrc npm_config_globalconfig=/dev/null npm_config_cache=$HOME/cache \
  npm_config_audit=false npm_config_fund=false npm_config_update_notifier=false npm_config_loglevel=error
printf '%s\n' 'registry=` + registry + `' '//npm.test:` + front.Port + `/:_authToken=${NPM_TOKEN}' > "$HOME/npmrc"
mkdir "$HOME/proj" && cd "$HOME/proj" && npm install --no-package-lock standin-pkg 2>&1 &&
  echo "required=$(node -e 'console.log(require("standin-pkg").name)')"
echo "elsewhere=$(curl -sS -H "Authorization: Bearer $NPM_TOKEN" https://other.example.test:` + front.Port + `/standin-pkg)"
echo "inbody=$(curl -sS -X PUT -H "Authorization: Bearer $NPM_TOKEN" --data "{\"t\":\"$NPM_TOKEN\"}" ` + registry + `standin-pkg)"
cd "$HOME"`
	ir := runInject(t, token, front.CAFile, egress, script)
	ir.check(t, "NPM_TOKEN", "required=standin-pkg",
		"elsewhere=coily: a credential placeholder was sent in header Authorization to other.example.test",
		"inbody=coily: a credential placeholder was sent")
	if reqs := strings.Join(front.Requests(), "\n"); !strings.Contains(reqs, "GET /standin-pkg/-/") || strings.Contains(reqs, "401") {
		t.Errorf("registry requests:\n%s", reqs)
	}
}

// The `gh` preset on a GitHub Enterprise host: gh's API calls (token
// form) and git over HTTPS (Basic, through gh's own credential helper)
// both get the token; the placeholder sent to another host is refused.
func TestCLIExecInjectGh(t *testing.T) {
	for _, tool := range []string{"curl", "gh"} {
		_, err := exec.LookPath(tool)
		requireComponent(t, err == nil, tool)
	}
	token := injectToken("gh")
	ghe := "ghe.example.test"
	g := standin.GitHubEnterprise(t, token, ghe, "other.example.test")
	g.ServeGit(t, "alice/app")
	egress := fmt.Sprintf(`      allow: ["%[1]s:%[2]s", "other.example.test:%[2]s"]
      allow_cidrs: [127.0.0.0/8]
      hosts: {%[1]s: [127.0.0.1], other.example.test: [127.0.0.1]}
      inspect: [other.example.test]
      inject:
        - {preset: gh, credential: "file:tok", host: "%[1]s:%[2]s", env: GH_ENTERPRISE_TOKEN}
`, ghe, g.Port)
	host := ghe + ":" + g.Port
	script := `export HOME=$(mktemp -d) GH_HOST=` + host + ` GH_PROMPT_DISABLED=1 GH_NO_UPDATE_NOTIFIER=1 NO_COLOR=1 GIT_TERMINAL_PROMPT=0
export GH_CONFIG_DIR=$HOME/gh
cd "$HOME"
echo "login=$(gh api user --jq .login)"
helper='!gh auth git-credential'
git -c credential.helper= -c credential.helper="$helper" clone -q https://` + host + `/alice/app.git app 2>&1 && echo cloned=yes
cd app && echo hello > README && git add README &&
  git -c user.name=a -c user.email=a@example.test commit -qm one &&
  git -c credential.helper= -c credential.helper="$helper" push -q origin HEAD:refs/heads/main 2>&1 && echo "pushed=$(git rev-parse HEAD)"
echo "elsewhere=$(curl -sS -H "Authorization: token $GH_ENTERPRISE_TOKEN" https://other.example.test:` + g.Port + `/api/v3/user)"
cd "$HOME"
head -c 3145728 /dev/urandom > asset.bin && echo "asset=$(sha256sum asset.bin | cut -c1-64)"
gh release upload v1 asset.bin -R alice/app 2>&1 && echo uploaded=yes
echo "token: $GH_ENTERPRISE_TOKEN" > leak.txt
gh release upload v1 leak.txt -R alice/app > leak.out 2>&1; echo "leak=$? $(tr '\n' ' ' < leak.out | head -c 400)"`
	ir := runInject(t, token, g.CAFile, egress, script)
	ir.check(t, "GH_ENTERPRISE_TOKEN", "login="+g.Login+"\n", "cloned=yes", "pushed=",
		"elsewhere=coily: a credential placeholder was sent in header Authorization to other.example.test",
		"uploaded=yes", "leak=1 ")
	if reqs := strings.Join(g.Requests(), "\n"); !strings.Contains(reqs, "GIT POST /alice/app.git/git-receive-pack token-repo=alice/app") {
		t.Errorf("no push reached the stand-in:\n%s", reqs)
	}
	// The release asset, 3 MiB through the inspected connection with the
	// token swapped in, arrived whole; the one holding the placeholder
	// never did (a placeholder in a body is refused).
	_, sum, _ := strings.Cut(ir.r.stdout, "asset=")
	sum, _, _ = strings.Cut(sum, "\n")
	if a := g.Assets(); len(a) != 1 || a[0].Name != "asset.bin" || a[0].Size != 3<<20 || a[0].SHA256 != sum || a[0].Repo != "alice/app" || a[0].Tag != "v1" {
		t.Errorf("assets %+v; want asset.bin, 3 MiB, sha256 %s, alone\nrequests:\n%s\noutput:\n%s", a, sum, strings.Join(g.Requests(), "\n"), ir.r.stdout)
	}
	_, leak, _ := strings.Cut(ir.r.stdout, "leak=")
	if leak, _, _ = strings.Cut(leak, "\n"); !strings.HasPrefix(leak, "1 HTTP 403") || !strings.Contains(leak, "name=leak.txt") {
		t.Errorf("the upload of a file holding the placeholder: %q; want gh failing on the proxy's 403", leak)
	}
	var up []string
	for _, q := range egressRecords(t, ir.dir)[0].EgressRequests {
		if strings.HasPrefix(q.Path, "/api/uploads/") {
			up = append(up, fmt.Sprintf("%s %s %d %v", q.Decision, q.Reason, q.Status, q.Injected))
		}
	}
	if want := []string{"allow  201 true", "deny placeholder 403 false"}; !slices.Equal(up, want) {
		t.Errorf("upload rows %q; want %q", up, want)
	}
}
