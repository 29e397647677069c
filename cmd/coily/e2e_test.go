package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"coily.dev/coily/audit"
	"coily.dev/coily/internal/testlog"
	"coily.dev/coily/workspace"
)

// coilyBin is the coily binary built once for these tests, in a directory
// every user may read (a test runs it as another uid).
var coilyBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "coily-bin-")
	if err != nil {
		panic(err)
	}
	code := 1
	defer func() {
		os.RemoveAll(dir)
		if coilyExecBin != "" {
			os.RemoveAll(filepath.Dir(coilyExecBin)) // buildCoilyExec's directory
		}
		os.Exit(code)
	}()
	if err := os.Chmod(dir, 0o755); err != nil {
		panic(err)
	}
	coilyBin = filepath.Join(dir, "coily")
	if prebuilt := os.Getenv("COILY_TEST_COILY"); prebuilt != "" {
		// Prebuilt by scripts/test.sh for the run as an unprivileged user.
		coilyBin = prebuilt
	}
	if os.Geteuid() == 0 {
		// The suite runs as root in CI too (and again as a user): servers
		// it starts accept that; TestServeRefusesRoot checks the refusal.
		os.Setenv("COILY_ALLOW_ROOT", "true")
	}
	if coilyBin == filepath.Join(dir, "coily") {
		out, err := exec.Command("go", "build", "-tags", buildTags, "-o", coilyBin, ".").CombinedOutput()
		if err != nil {
			fmt.Fprintf(os.Stderr, "build coily: %v\n%s", err, out)
			return
		}
	}
	code = m.Run()
}

// requireComponent fails under CI=true (where every component is
// installed) and skips elsewhere.
func requireComponent(t testing.TB, ok bool, what string) {
	t.Helper()
	if ok {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s is required under CI=true", what)
	}
	t.Skipf("%s not available", what)
}

type serveProc struct {
	cmd    *exec.Cmd
	log    *testlog.Buffer
	dir    string
	socket string
}

func examplePolicy(t *testing.T) string {
	t.Helper()
	p, err := filepath.Abs("../../examples/local.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// startServe runs `coily serve` and waits until its socket answers.
func startServe(t testing.TB, dir, policyPath string, extra ...string) *serveProc {
	t.Helper()
	p := &serveProc{log: new(testlog.Buffer), dir: dir, socket: filepath.Join(dir, "coily.sock")}
	p.cmd = exec.Command(coilyBin, append([]string{"serve", "--state-dir", dir, "--policy", policyPath}, extra...)...)
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.stop)
	deadline := time.Now().Add(15 * time.Second)
	for {
		if r := p.run(t, "status"); r.code == 0 {
			return p
		}
		if time.Now().After(deadline) {
			t.Fatalf("server did not become ready:\n%s", p.log)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (p *serveProc) stop() {
	if p.cmd.ProcessState != nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = p.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		_ = p.cmd.Process.Kill()
		<-done
	}
}

type cliRun struct {
	code           int
	stdout, stderr string
}

func (p *serveProc) run(t testing.TB, args ...string) cliRun {
	t.Helper()
	return runCoily(t, nil, append([]string{"--socket", p.socket}, args...)...)
}

// runCoily runs the coily binary; cred, when set, runs it as another user.
func runCoily(t testing.TB, cred *syscall.Credential, args ...string) cliRun {
	t.Helper()
	cmd := exec.Command(coilyBin, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	}
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return cliRun{code: code, stdout: out.String(), stderr: errb.String()}
}

func shortDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "coily-e2e-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		os.RemoveAll(dir)
		if os.Geteuid() == 0 {
			// A root server's scratch directory, were dir its state
			// directory: what one killed by a test left.
			os.RemoveAll(workspace.RootScratchDir(dir))
		}
	})
	return dir
}

func TestCLIExecAcceptance(t *testing.T) {
	p := startServe(t, shortDir(t), examplePolicy(t))
	for _, tt := range []struct {
		args       []string
		code       int
		out, inErr string
	}{
		{[]string{"exec", "--", "/bin/echo", "hi"}, 0, "hi\n", ""},
		{[]string{"exec", "--", "/bin/sh", "-c", "exit 7"}, 7, "", ""},
		{[]string{"exec", "--", "/usr/bin/id"}, 125, "", "coily: refused (policy-deny): "},
		{[]string{"exec", "--", "/bin/sh", "-c", "kill -KILL $$"}, 137, "", ""},
		{[]string{"exec", "--timeout", "200ms", "--", "/bin/sleep", "5"}, 124, "", "coily: refused (command-timeout): "},
		{[]string{"exec", "--", "sh", "-c", "exit 3"}, 3, "", ""}, // a bare name: the rule's /bin/sh
		{[]string{"exec", "--", "./sh", "-c", "true"}, 125, "", "coily: refused (bad-request): "},
		{[]string{"exec", "/bin/echo", "hi"}, 2, "", "coily: put -- before the command"},
		{[]string{"exec", "--bogus", "--", "/bin/echo"}, 2, "", "coily: unknown flag: --bogus"},
	} {
		r := p.run(t, tt.args...)
		if r.code != tt.code || r.stdout != tt.out || !strings.HasPrefix(r.stderr, tt.inErr) || (tt.inErr == "" && r.stderr != "") {
			t.Errorf("coily %v: code %d stdout %q stderr %q; want %d %q %q", tt.args, r.code, r.stdout, r.stderr, tt.code, tt.out, tt.inErr)
		}
	}
}

func TestCLIOtherUIDRefused(t *testing.T) {
	requireComponent(t, os.Geteuid() == 0, "root (to run a client as another uid)")
	dir := shortDir(t)
	p := startServe(t, dir, examplePolicy(t))
	// Open everything up: only the peer credentials stand in the way.
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p.socket, 0o777); err != nil {
		t.Fatal(err)
	}
	nobody := &syscall.Credential{Uid: 65534, Gid: 65534}
	for _, args := range [][]string{{"status"}, {"exec", "--", "/bin/echo", "hi"}, {"lockout"}, {"unlock"}} {
		r := runCoily(t, nobody, append([]string{"--socket", p.socket}, args...)...)
		if r.code != 125 || !strings.HasPrefix(r.stderr, "coily: refused (unauthenticated): ") {
			t.Fatalf("as uid 65534, coily %v: code %d stderr %q", args, r.code, r.stderr)
		}
	}
	recs, err := audit.Tail(filepath.Join(dir, "audit"), 100)
	if err != nil {
		t.Fatal(err)
	}
	refused := 0
	for _, rec := range recs {
		if rec.Code == "unauthenticated" && strings.Contains(rec.Peer, "uid=65534") {
			refused++
		}
	}
	// One each, and two for exec: with no pass_env names kept for this
	// server, coily exec asks ListCommands for them first (refused too).
	if refused != 5 {
		t.Fatalf("%d unauthenticated refusals of uid 65534 audited, want 5", refused)
	}
	if r := p.run(t, "status"); r.code != 0 || r.stdout == "" {
		t.Fatalf("the operator can no longer call: %+v", r)
	}
	if st := p.run(t, "status"); st.code != 0 || !strings.Contains(st.stdout, "lockout:     off") {
		t.Fatalf("a refused lockout took effect: %s", st.stdout)
	}
}

func TestCLILockoutSurvivesRestart(t *testing.T) {
	dir := shortDir(t)
	p := startServe(t, dir, examplePolicy(t))
	if r := p.run(t, "lockout", "--reason", "e2e"); r.code != 0 {
		t.Fatalf("lockout: %+v", r)
	}
	if r := p.run(t, "exec", "--", "/bin/true"); r.code != 125 || !strings.Contains(r.stderr, "(lockout-active)") {
		t.Fatalf("exec while locked: %+v", r)
	}
	p.stop()
	p = startServe(t, dir, examplePolicy(t))
	if r := p.run(t, "status"); !strings.Contains(r.stdout, "lockout:     ACTIVE") || !strings.Contains(r.stdout, "(e2e)") {
		t.Fatalf("status after restart: %+v", r)
	}
	if r := p.run(t, "exec", "--", "/bin/true"); r.code != 125 || !strings.Contains(r.stderr, "(lockout-active)") {
		t.Fatalf("exec after restart: %+v", r)
	}
	if r := p.run(t, "unlock"); r.code != 0 {
		t.Fatalf("unlock: %+v", r)
	}
	if r := p.run(t, "exec", "--", "/bin/echo", "ok"); r.code != 0 || r.stdout != "ok\n" {
		t.Fatalf("exec after unlock: %+v", r)
	}
	r := p.run(t, "status", "--json")
	var st struct {
		Caller struct{ Principal string }
	}
	if err := json.Unmarshal([]byte(r.stdout), &st); r.code != 0 || err != nil || !strings.HasPrefix(st.Caller.Principal, "local:") {
		t.Fatalf("status --json: %v %+v", err, r)
	}
}

func TestCLIAuditVerifyNamesTamperedLine(t *testing.T) {
	dir := shortDir(t)
	p := startServe(t, dir, examplePolicy(t))
	for i := 0; i < 3; i++ {
		p.run(t, "exec", "--", "/bin/echo", fmt.Sprint(i))
	}
	p.stop()
	global := []string{"--state-dir", dir}
	if r := runCoily(t, nil, append(global, "audit", "verify")...); r.code != 0 || !strings.Contains(r.stdout, "audit log OK: 8 records") { // a checkpoint, the new checkpoint key, then 3 × decision and result
		t.Fatalf("verify: %+v", r)
	}
	if r := runCoily(t, nil, append(global, "audit", "tail", "-n", "2")...); r.code != 0 || strings.Count(r.stdout, "\n") != 2 {
		t.Fatalf("tail: %+v", r)
	}
	if r := runCoily(t, nil, append(global, "audit", "show", "--json", "A000000000005")...); r.code != 0 || !strings.Contains(r.stdout, `"argv":["/bin/echo","1"]`) {
		t.Fatalf("show: %+v", r)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "audit", "*.jsonl"))
	if len(files) != 1 {
		t.Fatalf("audit files %v", files)
	}
	data, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	// Change one byte of the third line: the argv "0" becomes "9".
	lines := bytes.SplitAfter(data, []byte("\n"))
	lines[2] = bytes.Replace(lines[2], []byte(`"/bin/echo","0"`), []byte(`"/bin/echo","9"`), 1)
	if err := os.WriteFile(files[0], bytes.Join(lines, nil), 0o600); err != nil {
		t.Fatal(err)
	}
	r := runCoily(t, nil, append(global, "audit", "verify")...)
	if r.code == 0 || !strings.Contains(r.stderr, filepath.Base(files[0])+":3:") {
		t.Fatalf("verify after tampering with line 3: %+v", r)
	}
}

func TestCLIGrpcurlListsService(t *testing.T) {
	grpcurl, err := exec.LookPath("grpcurl")
	requireComponent(t, err == nil, "grpcurl (installed by scripts/tools.sh)")
	p := startServe(t, shortDir(t), examplePolicy(t))
	out, err := exec.Command(grpcurl, "-plaintext", "-unix", p.socket, "list").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "coily.v1.CoilyService") {
		t.Fatalf("grpcurl list: %v\n%s", err, out)
	}
}

func TestServeRefusesBrokenPolicy(t *testing.T) {
	dir := shortDir(t)
	pol := filepath.Join(dir, "broken.yaml")
	if err := os.WriteFile(pol, []byte("version: 1\ncommands:\n  - name: echo\n    binary: echo\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := runCoily(t, nil, "serve", "--state-dir", dir, "--policy", pol)
	if r.code != 1 || !strings.Contains(r.stderr, pol+":4:") {
		t.Fatalf("serve with a broken policy: %+v", r)
	}
	if _, err := os.Stat(filepath.Join(dir, "coily.sock")); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("a server with a broken policy left a socket")
	}
}

// A policy whose tests fail is refused at start, as on reload.
func TestServeRefusesPolicyFailingItsTests(t *testing.T) {
	dir := shortDir(t)
	pol := filepath.Join(dir, "p.yaml")
	if err := os.WriteFile(pol, []byte("version: 1\ncommands:\n  - {name: echo, binary: /bin/echo}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := "version: 1\ncases:\n  - {name: agent echoes, principal: tag:agent, argv: [/bin/echo], expect: allow, rule: echo}\n"
	if err := os.WriteFile(filepath.Join(dir, "p.tests.yaml"), []byte(tests), 0o600); err != nil {
		t.Fatal(err)
	}
	r := runCoily(t, nil, "serve", "--state-dir", dir, "--policy", pol)
	if r.code != 1 || !strings.Contains(r.stderr, `p.tests.yaml:3:5: case "agent echoes": expected allow by rule "echo", got deny`) {
		t.Fatalf("serve with a policy failing its tests: %+v", r)
	}
	if _, err := os.Stat(filepath.Join(dir, "coily.sock")); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("a server refusing its policy left a socket")
	}
}

// coily serve does not run as root unless told to.
func TestServeRefusesRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		// As a user, it starts: the run as root (CI runs both) checks the refusal.
		p := startServe(t, shortDir(t), examplePolicy(t))
		if strings.Contains(p.log.String(), "root") {
			t.Fatalf("a user's server talks of root: %s", p.log)
		}
		return
	}
	dir := shortDir(t)
	cmd := exec.Command(coilyBin, "serve", "--state-dir", dir, "--policy", examplePolicy(t))
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "COILY_ALLOW_ROOT=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "refusing to run as root") || !strings.Contains(string(out), "--allow-root") {
		t.Fatalf("serve as root: %v\n%s", err, out)
	}
	if _, err := os.Stat(filepath.Join(dir, "coily.sock")); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("a refused server left a socket")
	}
}

// The unlock path of docs/operations.md: the server's socket group lets
// its members reach the socket, the policy names the group as local
// operators, and a member unlocks (over `tailscale ssh`, a login on the
// host like this one).
func TestCLIUnlockThroughSocketGroup(t *testing.T) {
	requireComponent(t, os.Geteuid() == 0, "root (to run the operator as another uid)")
	dir := shortDir(t)
	pol := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(pol, []byte("version: 1\nlocal_operators: {groups: [nogroup]}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p := startServe(t, dir, pol, "--socket-group", "nogroup")
	fi, err := os.Stat(p.socket)
	if err != nil || fi.Mode().Perm() != 0o660 {
		t.Fatalf("socket mode: %v %v", fi.Mode(), err)
	}
	if r := p.run(t, "lockout", "--reason", "drill"); r.code != 0 {
		t.Fatalf("lockout: %+v", r)
	}
	operator := &syscall.Credential{Uid: 65534, Gid: 65534} // nobody, in group nogroup
	r := runCoily(t, operator, "--socket", p.socket, "unlock", "--reason", "drill over")
	if r.code != 0 {
		t.Fatalf("unlock by a member of the socket group: %+v", r)
	}
	if r := p.run(t, "status"); r.code != 0 || !regexp.MustCompile(`(?m)^lockout:\s+off$`).MatchString(r.stdout) {
		t.Fatalf("status after unlock: %+v", r)
	}
	// Outside the group, the socket is closed to it.
	outsider := &syscall.Credential{Uid: 65533, Gid: 65533}
	if r := runCoily(t, outsider, "--socket", p.socket, "lockout"); r.code == 0 {
		t.Fatalf("an outsider reached the socket: %+v", r)
	}
}

// readAudit is the text of every audit log file in the state dir.
func readAudit(t *testing.T, dir string) string {
	t.Helper()
	logs, _ := filepath.Glob(filepath.Join(dir, "audit", "*.jsonl"))
	var all []byte
	for _, l := range logs {
		data, err := os.ReadFile(l)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, data...)
	}
	return string(all)
}

// gitOut runs git on the host with no user or system configuration.
func gitOut(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null",
		"GIT_AUTHOR_NAME=seed", "GIT_AUTHOR_EMAIL=seed@example.com", "GIT_COMMITTER_NAME=seed", "GIT_COMMITTER_EMAIL=seed@example.com")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v: %s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}
