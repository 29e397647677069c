//go:build coilydev

package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"coily.dev/coily/internal/testlog"
)

// devProc is a running `coily dev`.
type devProc struct {
	cmd    *exec.Cmd
	log    *testlog.Buffer
	dir    string
	exited chan struct{}
}

// startDev runs `coily dev` with args and waits until it has written
// DIR/env (it serves) and DIR/demo.key.
func startDev(t *testing.T, dir string, args ...string) *devProc {
	t.Helper()
	p := &devProc{log: new(testlog.Buffer), dir: dir, exited: make(chan struct{})}
	p.cmd = exec.Command(coilyBin, append([]string{"dev"}, args...)...)
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = p.cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() { p.stop(t) })
	for _, f := range []string{"env", "demo.key"} {
		path := filepath.Join(dir, f)
		deadline := time.Now().Add(60 * time.Second)
		for {
			if _, err := os.Stat(path); err == nil {
				break
			}
			select {
			case <-p.exited:
				t.Fatalf("coily dev exited before writing %s:\n%s", path, p.log)
			default:
			}
			if time.Now().After(deadline) {
				t.Fatalf("coily dev did not write %s:\n%s", path, p.log)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return p
}

// stop SIGTERMs coily dev and waits for it, returning its exit code.
func (p *devProc) stop(t *testing.T) int {
	t.Helper()
	select {
	case <-p.exited:
		return p.cmd.ProcessState.ExitCode()
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(15 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
		t.Errorf("coily dev did not stop on SIGTERM:\n%s", p.log)
	}
	return p.cmd.ProcessState.ExitCode()
}

// TestCLIDev runs `coily dev` and uses it as a new user would.
func TestCLIDev(t *testing.T) {
	dir := shortDir(t)
	p := startDev(t, dir, "--state-dir", dir)
	log := p.log
	envFile := filepath.Join(dir, "env")
	env, _ := os.ReadFile(envFile)
	if !strings.Contains(string(env), "export COILY_DEV='"+dir+"'") {
		t.Fatalf("env file: %s", env)
	}
	if !strings.Contains(log.String(), "NOT FOR PRODUCTION") {
		t.Fatalf("no production warning in the banner:\n%s", log.String())
	}
	as := func(who string, args ...string) cliRun {
		t.Setenv("COILY_DEV", dir)
		t.Setenv("COILY_DEV_AS", who)
		return runCoily(t, nil, args...)
	}
	if r := as("owner", "exec", "--", "/bin/echo", "hi"); r.code != 0 || r.stdout != "hi\n" {
		t.Fatalf("owner exec: %+v", r)
	}
	// The demo credential is injected and comes back only redacted.
	r := as("owner", "exec", "--", "/usr/bin/env")
	if r.code != 0 || !strings.Contains(r.stdout, "COILY_DEMO_TOKEN=[REDACTED:COILY_DEMO_TOKEN]\n") {
		t.Fatalf("env: %+v", r)
	}
	creds, err := os.ReadFile(filepath.Join(dir, "credentials"))
	if err != nil {
		t.Fatal(err)
	}
	_, demo, _ := strings.Cut(strings.TrimSpace(string(creds)), "demo=")
	if len(demo) < 20 || strings.Contains(r.stdout+r.stderr+log.String(), demo) {
		t.Fatalf("the demo secret (%d bytes) leaked or was not seeded", len(demo))
	}
	if r := as("owner", "status"); r.code != 0 || !strings.Contains(r.stdout, "tag:owner via tailnet") {
		t.Fatalf("status: %+v", r)
	}
	if r := as("stranger", "exec", "--", "/bin/echo", "hi"); r.code != 125 || !strings.Contains(r.stderr, "(permission-denied)") {
		t.Fatalf("stranger exec: %+v", r)
	}
	if r := as("agent", "unlock"); r.code != 125 || !strings.Contains(r.stderr, "(permission-denied)") {
		t.Fatalf("agent unlock: %+v", r)
	}
	// --socket on the command line wins over COILY_DEV from the environment.
	if r := as("owner", "--socket", filepath.Join(dir, "coily.sock"), "status"); r.code != 0 || !strings.Contains(r.stdout, "via local") {
		t.Fatalf("--socket with COILY_DEV set: %+v", r)
	}
	if r := as("nobody-in-particular", "status"); r.code != 2 || !strings.Contains(r.stderr, "COILY_DEV_AS") {
		t.Fatalf("bad COILY_DEV_AS accepted: %+v", r)
	}
	t.Setenv("COILY_DEV_AS", "owner")
	devSandboxExec(t, dir)
}

// devSandboxExec runs `coily exec` as the demo sandbox would: request file
// → coily dev's bridge → the dev tailnet (as tag:bridge) → the server →
// the sandboxed command → response file.
func devSandboxExec(t *testing.T, dir string) {
	key := filepath.Join(dir, "demo.key")
	waitFile(t, key, "coily dev to write "+key, 30*time.Second)
	waitDir(t, filepath.Join(dir, "mount", ".coily", "requests")) // the bridge serves
	t.Setenv("SANDBOX_RUNTIME", "1")
	t.Setenv("COILY_MOUNT", filepath.Join(dir, "mount"))
	t.Setenv("COILY_KEY_FILE", key)
	if r := runCoily(t, nil, "exec", "--", "/bin/echo", "hi"); r.code != 0 || r.stdout != "hi\n" {
		t.Fatalf("sandbox exec: %+v", r)
	}
	if r := runCoily(t, nil, "exec", "--", "/bin/cat", "/etc/hostname"); r.code != 125 || !strings.Contains(r.stderr, "(policy-deny)") {
		t.Fatalf("sandbox exec of a command the policy refuses: %+v", r)
	}
	logs, _ := filepath.Glob(filepath.Join(dir, "audit", "*.jsonl"))
	var audit []byte
	for _, l := range logs {
		data, _ := os.ReadFile(l)
		audit = append(audit, data...)
	}
	if !strings.Contains(string(audit), `"principal":"sandbox:demo"`) || !strings.Contains(string(audit), "bridge tag:bridge") {
		t.Fatalf("the audit log does not show the relayed request with both identities")
	}
}
