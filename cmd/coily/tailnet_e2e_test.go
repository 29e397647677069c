package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"coily.dev/coily/internal/devnet"
	"coily.dev/coily/internal/testlog"
)

// TestCLIServeTailnet runs `coily serve --tailnet` against a private
// control server and reaches it with `coily --tsnet --server`.
func TestCLIServeTailnet(t *testing.T) {
	net, err := devnet.Start(nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(net.Close)
	dir := shortDir(t)
	pol := filepath.Join(dir, "policy.yaml")
	err = os.WriteFile(pol, []byte(`version: 1
roles: {user: {permissions: [exec, status], commands: [echo]}}
grants: [{principals: ["*@fake-control.example.net"], roles: [user]}]
commands: [{name: echo, binary: /bin/echo, args: ["**"], sandbox: native}]
`), 0o600)
	if err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), devnet.OfflineEnv()...)
	var log testlog.Buffer
	srv := exec.Command(coilyBin, "serve", "--tailnet", "--hostname", "coily", "--control-url", net.ControlURL,
		"--state-dir", dir, "--policy", pol)
	srv.Env, srv.Stdout, srv.Stderr = env, &log, &log
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Process.Signal(syscall.SIGTERM); _ = srv.Wait() })
	deadline := time.Now().Add(60 * time.Second)
	for !strings.Contains(log.String(), "tailnet=coily:7443") {
		if time.Now().After(deadline) {
			t.Fatalf("serve --tailnet did not come up:\n%s", log.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	cmd := exec.Command(coilyBin, "--tsnet", "--server", "coily", "--control-url", net.ControlURL, "status")
	var out, errb bytes.Buffer
	cmd.Env, cmd.Stdout, cmd.Stderr = env, &out, &errb
	err = cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatal(err)
	}
	if err != nil || !strings.Contains(out.String(), "@fake-control.example.net via tailnet") {
		t.Fatalf("status over --tsnet: %v\nstdout: %s\nstderr: %s\nserver: %s", err, out.String(), errb.String(), log.String())
	}
}
