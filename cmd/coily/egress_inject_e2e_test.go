package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"coily.dev/coily/internal/canary"
	"coily.dev/coily/internal/poll"
	"coily.dev/coily/internal/standin"
)

// A rule that injects its token through the egress proxy: gh and curl,
// given a placeholder, reach the GitHub stand-in over TLS with the real
// token, which is nowhere in the sandbox (its environment, every
// process's /proc/PID/environ, the files it can read under /run/coily and
// its temp directory, the memory of every process of the sandbox read
// from the host while its last one waits), nor in the answer, the
// server's log or the audit log; the placeholder sent elsewhere or in a
// query is refused; the audit record carries the requests (a query only
// by its hash).
func TestCLIExecEgressInject(t *testing.T) {
	requireBwrap(t)
	for _, tool := range []string{"curl", "gh"} {
		_, err := exec.LookPath(tool)
		requireComponent(t, err == nil, tool)
	}
	dir := shortDir(t)
	token := "ghp_Canary" + strings.ToUpper(strconv.FormatInt(time.Now().UnixNano(), 36)) + "injQ"
	ghe := "ghe.example.test"
	g := standin.GitHubEnterprise(t, token, ghe, "other.example.test")
	creds := filepath.Join(dir, "credentials")
	if err := os.WriteFile(creds, []byte("gh="+token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	pol := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(pol, []byte(fmt.Sprintf(`version: 1
roles: {operator: {permissions: [exec, status], commands: [sh]}}
commands:
  - name: sh
    binary: /bin/sh
    args: ["**"]
    flags: any
    network: proxied
    sandbox: bwrap
    ca_file: %s
    egress:
      allow: ["%s:%s", "other.example.test:%s"]
      allow_cidrs: [127.0.0.0/8]
      hosts: {%s: [127.0.0.1], other.example.test: [127.0.0.1]}
      inspect: [%s, other.example.test]
      http: {%s: ["GET /api/v3/**", "POST /api/graphql"]}
      inject:
        - {env: GH_ENTERPRISE_TOKEN, credential: "file:gh", host: "%s:%s", path: /api/, form: token}
`, g.CAFile, ghe, g.Port, g.Port, ghe, ghe, ghe, ghe, g.Port)), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startServe(t, dir, pol, "--credentials-file", creds)
	// The command's last process is a sleep the test finds by its unique
	// argument, reads the sandbox's memory around, then kills.
	marker := fmt.Sprintf("86399.%06d", time.Now().UnixNano()%1000000)
	script := `export GH_HOST=` + ghe + `:` + g.Port + ` GH_CONFIG_DIR=$(mktemp -d) GH_PROMPT_DISABLED=1 GH_NO_UPDATE_NOTIFIER=1 NO_COLOR=1
echo "login=$(gh api user --jq .login)"
echo "curl=$(curl -sS -H "Authorization: token $GH_ENTERPRISE_TOKEN" https://$GH_HOST/api/v3/user)"
echo "elsewhere=$(curl -sS -H "Authorization: token $GH_ENTERPRISE_TOKEN" https://other.example.test:` + g.Port + `/api/v3/user)"
echo "query=$(curl -sS "https://$GH_HOST/api/v3/user?t=$GH_ENTERPRISE_TOKEN")"
echo "rule=$(curl -sS -X DELETE -H "Authorization: token $GH_ENTERPRISE_TOKEN" https://$GH_HOST/api/v3/user)"
echo "--- env"; env
echo "--- environ"; for f in /proc/[0-9]*/environ; do tr '\0' '\n' < "$f" 2>/dev/null; done
echo "--- files"; cat /run/coily/ca.pem >/dev/null; grep -rIl ghp_ /run/coily "$TMPDIR" /tmp 2>/dev/null
sleep ` + marker + `
true`
	c := canary.New(t)
	c.AddString("gh token", token)
	done := make(chan cliRun, 1)
	go func() { done <- p.run(t, "exec", "--", "/bin/sh", "-c", script) }()
	checkSandboxMemory(t, c, marker, done)
	r := <-done
	if r.code != 0 || !strings.Contains(r.stdout, "login="+g.Login+"\n") || !strings.Contains(r.stdout, `curl={"id":1,"login":"`+g.Login) {
		t.Fatalf("gh and curl with the placeholder: %+v\n%s", r, p.log)
	}
	for _, want := range []string{"elsewhere=coily: a credential placeholder was sent in header Authorization to other.example.test",
		"query=coily: a credential placeholder was sent in the URL", "rule=coily: DELETE /api/v3/user is not allowed",
		"GH_ENTERPRISE_TOKEN=coily-placeholder-", "SSL_CERT_FILE=/run/coily/ca.pem"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("the sandbox's output lacks %q:\n%s", want, r.stdout)
		}
	}
	// The server redacts what it knows from the output: a redaction there
	// would mean the sandbox had the secret.
	if strings.Contains(r.stdout, "REDACTED") || strings.Contains(r.stderr, "REDACTED") {
		t.Errorf("the sandbox held the secret (its output was redacted):\n%s", r.stdout)
	}
	c.CheckText("the exec's answer", r.stdout, r.stderr)
	c.CheckText("the server's log", p.log.String())
	c.CheckText("the audit log", readAudit(t, dir))
	recs := egressRecords(t, dir)
	if len(recs) != 1 {
		t.Fatalf("%d exec.result records", len(recs))
	}
	var injected, refused int
	for _, q := range recs[0].EgressRequests {
		if q.Injected && q.Status == 200 && q.Host == ghe && !strings.Contains(q.Path, "?") {
			injected++
		}
		if q.Decision == "deny" && q.Status == 403 {
			refused++
		}
	}
	var hashed int
	for _, q := range recs[0].EgressRequests {
		if strings.HasPrefix(q.Query, "sha256:") && q.Reason == "placeholder" {
			hashed++
		}
	}
	if injected < 2 || refused != 3 || hashed != 1 {
		t.Errorf("request rows %+v: want 2+ injected, 3 refused, the query's row with its hash", recs[0].EgressRequests)
	}
	out := runCoily(t, nil, "audit", "show", "--state-dir", dir, recs[0].ID)
	for _, l := range strings.Split(out.stdout, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "request ") && strings.Contains(l, "?") {
			t.Errorf("a request row shows a query: %q", l)
		}
	}
	if !strings.Contains(out.stdout, "request allow  "+ghe+":"+g.Port+"  GET /api/v3/user  200") || !strings.Contains(out.stdout, "http-rule") ||
		!strings.Contains(out.stdout, "  query sha256:") {
		t.Errorf("coily audit show:\n%s", out.stdout)
	}
}

// checkSandboxMemory waits for the sandbox's process sleeping for
// marker seconds, reads the memory of every process in its PID namespace
// from the host (as root, or as the same user: an ancestor may ptrace its
// descendants), fails on the canary there, requires the placeholder seen
// (the read worked), and kills the sleep so that the command ends.
func checkSandboxMemory(t *testing.T, c *canary.Canary, marker string, done <-chan cliRun) {
	t.Helper()
	var sleeper int
	poll.Until(t, 90*time.Second, "the sandbox's sleep "+marker, func() bool {
		select {
		case r := <-done:
			t.Fatalf("the command ended before its sleep was found: %+v", r)
		default:
		}
		sleeper = findProcess("sleep\x00" + marker + "\x00")
		return sleeper != 0
	})
	pids, err := canary.PIDNamespace(sleeper)
	if err != nil || len(pids) < 2 {
		t.Fatalf("the sandbox's processes: %v %v; want the shell and its sleep at least", pids, err)
	}
	seen, n := c.CheckMemory(pids, []byte("GH_ENTERPRISE_TOKEN=coily-placeholder-"))
	if !seen {
		t.Errorf("the placeholder was not found in the memory of pids %v (%d bytes read): the read proves nothing", pids, n)
	}
	t.Logf("read %d bytes of memory of %d sandbox processes", n, len(pids))
	if err := syscall.Kill(sleeper, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
}

// findProcess is the pid of a process whose /proc/PID/cmdline is
// cmdline, 0 when none.
func findProcess(cmdline string) int {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline"); err == nil && string(b) == cmdline {
			return pid
		}
	}
	return 0
}

// `coily sandbox exec --egress-inspect --egress-inject` tries inspection
// alone: the value of $VAR in coily's environment is injected, the
// command holds a placeholder, and the request rows are printed.
func TestSandboxExecEgressInject(t *testing.T) {
	requireBwrap(t)
	_, err := exec.LookPath("curl")
	requireComponent(t, err == nil, "curl")
	token := "ghp_Canary" + strings.ToUpper(strconv.FormatInt(time.Now().UnixNano(), 36)) + "sbxQ"
	g := standin.GitHubEnterprise(t, token)
	script := `curl -sS --noproxy "" -H "Authorization: Bearer $GH_TOKEN" https://localhost:` + g.Port + `/api/v3/user; echo; env | grep -c ghp_ || true`
	cmd := exec.Command(coilyBin, "sandbox", "exec", "--network", "proxied", "--egress-allow", "localhost:"+g.Port,
		"--egress-allow-cidr", "127.0.0.0/8", "--egress-inspect", "localhost", "--egress-inject", "GH_TOKEN@localhost:"+g.Port+"/api/:bearer",
		"--", "/bin/sh", "-c", script)
	// The proxy verifies the stand-in with the roots Go reads from SSL_CERT_FILE.
	cmd.Env = append(os.Environ(), "GH_TOKEN="+token, "SSL_CERT_FILE="+g.CAFile)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil || !strings.Contains(out.String(), `"login":"`+g.Login) || !strings.Contains(out.String(), "\n0\n") {
		t.Fatalf("sandbox exec: %v\nstdout %s\nstderr %s", err, out.String(), errb.String())
	}
	if !strings.Contains(errb.String(), "coily: request allow  localhost:"+g.Port+"  GET /api/v3/user  200") || !strings.Contains(errb.String(), "injected") {
		t.Errorf("stderr lacks the request row:\n%s", errb.String())
	}
	c := canary.New(t)
	c.AddString("GH_TOKEN", token)
	c.CheckText("sandbox exec's output", out.String(), errb.String())
}

// `coily sandbox exec --egress-inject-preset VAR=gh@HOST` runs the real gh
// against a GitHub Enterprise stand-in (pinned with --egress-host): the
// preset's entries and inspected hosts come from the same code as a
// policy's, gh's API call gets the token, the command holds a
// placeholder, and the placeholder sent to another host is refused.
func TestSandboxExecEgressInjectPresetGh(t *testing.T) {
	requireBwrap(t)
	for _, tool := range []string{"curl", "gh"} {
		_, err := exec.LookPath(tool)
		requireComponent(t, err == nil, tool)
	}
	token := injectToken("ghsbx")
	ghe, other := "ghe.example.test", "other.example.test"
	g := standin.GitHubEnterprise(t, token, ghe, other)
	host := ghe + ":" + g.Port
	script := `export HOME=$(mktemp -d) GH_HOST=` + host + ` GH_PROMPT_DISABLED=1 GH_NO_UPDATE_NOTIFIER=1 NO_COLOR=1
export GH_CONFIG_DIR=$HOME/gh
echo "login=$(gh api user --jq .login)"
echo "elsewhere=$(curl -sS -H "Authorization: token $GH_ENTERPRISE_TOKEN" https://` + other + `:` + g.Port + `/api/v3/user)"
echo "placeholder=${GH_ENTERPRISE_TOKEN%%-*}"
env | grep -c ` + canaryMark + ` || true`
	cmd := exec.Command(coilyBin, "sandbox", "exec", "--network", "proxied", "--egress-allow", host, "--egress-allow", other+":"+g.Port,
		"--egress-allow-cidr", "127.0.0.0/8", "--egress-host", ghe+"=127.0.0.1", "--egress-host", other+"=127.0.0.1",
		"--egress-inspect", other, "--egress-inject-preset", "GH_ENTERPRISE_TOKEN=gh@"+host,
		"--", "/bin/sh", "-c", script)
	// The proxy verifies the stand-in with the roots Go reads from SSL_CERT_FILE.
	cmd.Env = append(os.Environ(), "GH_ENTERPRISE_TOKEN="+token, "SSL_CERT_FILE="+g.CAFile)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("sandbox exec: %v\nstdout %s\nstderr %s", err, out.String(), errb.String())
	}
	for _, w := range []string{"login=" + g.Login + "\n", "placeholder=coily\n", "\n0\n",
		"elsewhere=coily: a credential placeholder was sent in header Authorization to " + other} {
		if !strings.Contains(out.String(), w) {
			t.Errorf("stdout lacks %q:\n%s\nstderr %s", w, out.String(), errb.String())
		}
	}
	if !strings.Contains(errb.String(), "coily: request allow  "+host+"  GET /api/v3/user  200") || !strings.Contains(errb.String(), "injected") {
		t.Errorf("stderr lacks the injected request row:\n%s", errb.String())
	}
	c := canary.New(t)
	c.AddString("GH_ENTERPRISE_TOKEN", token)
	c.CheckText("sandbox exec's output", out.String(), errb.String())
}
