package main

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"coily.dev/coily/client"
	"coily.dev/coily/client/folder"
	"coily.dev/coily/descriptor"
	coilyv1 "coily.dev/coily/proto/coily/v1"
)

// keyPolicy lets the local operator issue keys and relay for sandbox
// "demo", whose relayed requests may run echo and sh.
const keyPolicy = `version: 1
roles:
  operator:
    permissions: [exec, lockout, unlock, pause, resume, status, keys, relay]
    commands: [echo, sh, sleep]
    sandboxes: [demo]
  sandboxed:
    permissions: [exec]
    commands: [echo, sh, sleep]
grants:
  - principals: ["sandbox:demo"]
    roles: [sandboxed]
commands:
  - {name: echo, binary: /bin/echo, args: ["**"], flags: any, sandbox: native}
  - {name: sh, binary: /bin/sh, args: ["**"], flags: any, sandbox: native}
  - {name: sleep, binary: /bin/sleep, args: ["**"], flags: any, sandbox: native}
`

func startKeyServer(t *testing.T) *serveProc {
	t.Helper()
	dir := shortDir(t)
	pol := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(pol, []byte(keyPolicy), 0o644); err != nil {
		t.Fatal(err)
	}
	return startServe(t, dir, pol)
}

// runIn runs the coily binary in dir with extra environment.
func runIn(t *testing.T, dir string, extraEnv []string, args ...string) cliRun {
	t.Helper()
	cmd := exec.Command(coilyBin, args...)
	cmd.Dir, cmd.Env = dir, append(os.Environ(), extraEnv...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
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

func readKey(t *testing.T, path string) folder.KeyFile {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("%s has mode %o, want 0600", path, fi.Mode().Perm())
	}
	k, err := folder.ReadKeyFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(k.Key) != 32 || k.Sandbox != "demo" {
		t.Fatalf("key file %v with a %d-byte key", k, len(k.Key))
	}
	return k
}

func assertNoKey(t *testing.T, r cliRun, k folder.KeyFile) {
	t.Helper()
	h := hex.EncodeToString(k.Key)
	if strings.Contains(r.stdout+r.stderr, h) || strings.Contains(r.stdout+r.stderr, h[:16]) {
		t.Fatalf("the key was printed: %+v", r)
	}
}

func TestCLIKeyBootstrapRotate(t *testing.T) {
	p := startKeyServer(t)
	out := t.TempDir()
	f := filepath.Join(out, "demo-key.json")

	r := p.run(t, "key", "bootstrap", "--sandbox", "demo", "--out", f)
	if r.code != 0 || r.stdout != "key for sandbox demo (generation 1) written to "+f+"\n" || r.stderr != "" {
		t.Fatalf("bootstrap: %+v", r)
	}
	k1 := readKey(t, f)
	assertNoKey(t, r, k1)
	if k1.Generation != 1 {
		t.Fatalf("generation %d, want 1", k1.Generation)
	}

	// A second bootstrap is refused and leaves the file alone.
	r = p.run(t, "key", "bootstrap", "--sandbox", "demo", "--out", f)
	if r.code != 125 || !strings.HasPrefix(r.stderr, "coily: refused (bad-request): ") {
		t.Fatalf("second bootstrap: %+v", r)
	}
	if k := readKey(t, f); !bytes.Equal(k.Key, k1.Key) {
		t.Fatal("a refused bootstrap changed the key file")
	}

	r = p.run(t, "key", "rotate", "--sandbox", "demo", "--out", f)
	if r.code != 0 || r.stdout != "key for sandbox demo (generation 2) written to "+f+"\n" {
		t.Fatalf("rotate --sandbox: %+v", r)
	}
	k2 := readKey(t, f)
	assertNoKey(t, r, k2)
	if k2.Generation != 2 || bytes.Equal(k2.Key, k1.Key) {
		t.Fatalf("after rotation: generation %d, key changed %v", k2.Generation, !bytes.Equal(k2.Key, k1.Key))
	}

	r = p.run(t, "key", "rotate")
	if r.code != 0 || !strings.Contains(r.stdout, "demo") || !strings.Contains(r.stdout, "rotate each again") {
		t.Fatalf("rotate: %+v", r)
	}
	if k := readKey(t, f); !bytes.Equal(k.Key, k2.Key) {
		t.Fatal("rotating every key wrote the key file")
	}
}

func TestCLIKeyBootstrapDefaultsAndRefusals(t *testing.T) {
	p := startKeyServer(t)
	work := t.TempDir()
	global := []string{"--socket", p.socket}

	// Refused before asking: a bad name, a symlinked target. The key is
	// not consumed, so a later bootstrap still works.
	if r := runIn(t, work, nil, append(global, "key", "bootstrap", "--sandbox", "../demo")...); r.code != 2 || !strings.Contains(r.stderr, "must match") {
		t.Fatalf("bad name: %+v", r)
	}
	if r := runIn(t, work, nil, append(global, "key", "bootstrap")...); r.code != 2 {
		t.Fatalf("no --sandbox: %+v", r)
	}
	if r := runIn(t, work, nil, append(global, "key", "rotate", "--out", "x")...); r.code != 2 {
		t.Fatalf("rotate --out without --sandbox: %+v", r)
	}
	victim := filepath.Join(work, "victim")
	if err := os.WriteFile(victim, []byte("keep\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(victim, filepath.Join(work, "demo.key")); err != nil {
		t.Fatal(err)
	}
	if r := runIn(t, work, nil, append(global, "key", "bootstrap", "--sandbox", "demo")...); r.code != 1 || !strings.Contains(r.stderr, "symbolic link") {
		t.Fatalf("symlinked target: %+v", r)
	}
	if data, _ := os.ReadFile(victim); string(data) != "keep\n" {
		t.Fatalf("wrote through the symlink: %q", data)
	}
	if err := os.Remove(filepath.Join(work, "demo.key")); err != nil {
		t.Fatal(err)
	}

	// The default file is ./NAME.key; --out has a COILY_KEY_OUT twin.
	if r := runIn(t, work, nil, append(global, "key", "bootstrap", "--sandbox", "demo")...); r.code != 0 || !strings.Contains(r.stdout, "written to demo.key") {
		t.Fatalf("default out: %+v", r)
	}
	readKey(t, filepath.Join(work, "demo.key"))
	twin := filepath.Join(work, "twin.key")
	if r := runIn(t, work, []string{"COILY_KEY_OUT=" + twin, "COILY_KEY_SANDBOX=demo"}, append(global, "key", "rotate")...); r.code != 0 || !strings.Contains(r.stdout, "(generation 2) written to "+twin) {
		t.Fatalf("rotate with COILY_* twins: %+v", r)
	}
	readKey(t, twin)
}

// relayBridge is a test stand-in for coily's filesystem bridge: it relays
// the files of one mount to the server over the local socket.
type relayBridge struct {
	t       *testing.T
	mount   string
	api     client.API
	relayed chan string // ids relayed
	torn    chan bool   // RelayTeardown's answers
}

func startRelayBridge(t *testing.T, p *serveProc, mount string) *relayBridge {
	t.Helper()
	c, err := client.DialLocal(p.socket)
	if err != nil {
		t.Fatal(err)
	}
	b := &relayBridge{t: t, mount: mount, api: c.API, relayed: make(chan string, 100), torn: make(chan bool, 100)}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait(); c.Close() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			for _, dir := range []string{descriptor.RequestsDir, descriptor.TeardownsDir} {
				entries, _ := os.ReadDir(descriptor.Path(mount, dir, ""))
				for _, e := range entries {
					id, ok := descriptor.IDFromName(e.Name())
					path := descriptor.Path(mount, dir, e.Name())
					data, err := os.ReadFile(path)
					os.Remove(path)
					if !ok || err != nil {
						continue
					}
					wg.Add(1)
					go func() {
						defer wg.Done()
						if dir == descriptor.TeardownsDir {
							b.teardown(ctx, id, data)
						} else {
							b.relay(ctx, id, data)
						}
					}()
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return b
}

func (b *relayBridge) relay(ctx context.Context, id string, data []byte) {
	b.relayed <- id
	resp, err := b.api.Relay(ctx, &coilyv1.RelayRequest{Sandbox: "demo", Id: id, Request: data})
	if err != nil {
		if ctx.Err() == nil {
			b.t.Errorf("relay %s: %v", id, err)
		}
		return
	}
	tmp := descriptor.Path(b.mount, descriptor.TmpDir, id+".bridge")
	if err := os.WriteFile(tmp, resp.GetResponse(), 0o600); err != nil {
		b.t.Errorf("bridge: %v", err)
		return
	}
	if err := os.Rename(tmp, descriptor.Path(b.mount, descriptor.ResponsesDir, descriptor.FileName(id))); err != nil {
		b.t.Errorf("bridge: %v", err)
	}
}

func (b *relayBridge) teardown(ctx context.Context, id string, data []byte) {
	resp, err := b.api.RelayTeardown(ctx, &coilyv1.RelayTeardownRequest{Sandbox: "demo", Id: id, Teardown: data})
	if err != nil {
		b.t.Errorf("relay teardown %s: %v", id, err)
		return
	}
	b.torn <- resp.GetCancelled()
}

// TestCLIKeySandboxExec runs `coily exec` in sandbox mode, with the key
// `coily key bootstrap` wrote, through a shared folder relayed to the
// server: output, exit codes and refusals read as they do over gRPC.
func TestCLIKeySandboxExec(t *testing.T) {
	p := startKeyServer(t)
	home := t.TempDir()
	keyFile := filepath.Join(home, "demo.key")
	if r := p.run(t, "key", "bootstrap", "--sandbox", "demo", "--out", keyFile); r.code != 0 {
		t.Fatalf("bootstrap: %+v", r)
	}
	mount := t.TempDir()
	if err := os.MkdirAll(filepath.Join(mount, ".coily", "requests"), 0o700); err != nil {
		t.Fatal(err)
	}
	work := filepath.Join(mount, "project")
	if err := os.Mkdir(work, 0o700); err != nil {
		t.Fatal(err)
	}
	b := startRelayBridge(t, p, mount)
	// No COILY_MOUNT: found by walking up from the working directory.
	sandboxEnv := []string{"SANDBOX_RUNTIME=1", "COILY_KEY_FILE=" + keyFile, "COILY_MOUNT=", "COILY_SOCKET=" + p.socket}

	for _, args := range [][]string{
		{"exec", "--", "/bin/echo", "hi"},
		{"exec", "--", "/bin/sh", "-c", "exit 7"},
		{"exec", "--", "/bin/sh", "-c", `printf '\377\000x'; echo err >&2`},
		{"exec", "--", "/bin/sh", "-c", "kill -KILL $$"},
		{"exec", "--", "/usr/bin/id"},
		{"exec", "--", "sh", "-c", "true"},
	} {
		viaFS := runIn(t, work, sandboxEnv, args...)
		viaGRPC := p.run(t, args...)
		if viaFS != viaGRPC {
			t.Errorf("coily %v:\n through the folder %+v\n over gRPC         %+v", args, viaFS, viaGRPC)
		}
	}
	if n := len(b.relayed); n != 6 {
		t.Fatalf("%d requests went through the folder, want 6", n)
	}
	// --socket on the command line wins over sandbox mode.
	if r := runIn(t, t.TempDir(), sandboxEnv, "--socket", p.socket, "exec", "--", "/bin/echo", "direct"); r.code != 0 || r.stdout != "direct\n" {
		t.Fatalf("with --socket: %+v", r)
	}
	// Without a mount, sandbox mode says how to name one.
	if r := runIn(t, t.TempDir(), sandboxEnv, "exec", "--", "/bin/echo", "x"); r.code != 125 || !strings.Contains(r.stderr, "COILY_MOUNT") {
		t.Fatalf("without a mount: %+v", r)
	}
	// Standard input goes through the folder only with --stdin, binary
	// safe; more than 1 MiB is refused before anything is written.
	withStdin := func(stdin []byte, args ...string) cliRun {
		cmd := exec.Command(coilyBin, args...)
		cmd.Dir, cmd.Env, cmd.Stdin = work, append(os.Environ(), sandboxEnv...), bytes.NewReader(stdin)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			t.Fatal(err)
		}
		return cliRun{code: cmd.ProcessState.ExitCode(), stdout: out.String(), stderr: errb.String()}
	}
	in := "text\x00\xff\n"
	if r := withStdin([]byte(in), "exec", "--stdin", "--", "/bin/sh", "-c", "cat"); r.code != 0 || r.stdout != in {
		t.Fatalf("--stdin: %+v", r)
	}
	if r := withStdin([]byte(in), "exec", "--", "/bin/sh", "-c", "cat"); r.code != 0 || r.stdout != in {
		t.Fatalf("piped stdin (--stdin=auto) did not reach the command: %+v", r)
	}
	if r := withStdin([]byte(in), "exec", "--stdin=false", "--", "/bin/sh", "-c", "cat"); r.code != 0 || r.stdout != "" {
		t.Fatalf("with --stdin=false the command read %+v", r)
	}
	relayed := len(b.relayed)
	if r := withStdin(make([]byte, 1<<20+1), "exec", "--stdin", "--", "/bin/sh", "-c", "cat"); r.code != 125 || !strings.HasPrefix(r.stderr, "coily: stdin: more than 1048576 bytes") {
		t.Fatalf("stdin over 1 MiB: %+v", r)
	}
	if len(b.relayed) != relayed {
		t.Fatal("a request with too much stdin was written")
	}
	// A key file that is a symbolic link is refused.
	link := filepath.Join(home, "link.key")
	if err := os.Symlink(keyFile, link); err != nil {
		t.Fatal(err)
	}
	linkEnv := append(append([]string(nil), sandboxEnv...), "COILY_KEY_FILE="+link)
	if r := runIn(t, work, linkEnv, "exec", "--", "/bin/echo", "x"); r.code != 125 || !strings.Contains(r.stderr, "symbolic link") {
		t.Fatalf("key file through a symlink: %+v", r)
	}
}

// Interrupting a sandbox-mode exec writes a teardown that stops the
// command on the server.
func TestCLIKeySandboxExecInterrupt(t *testing.T) {
	p := startKeyServer(t)
	keyFile := filepath.Join(t.TempDir(), "demo.key")
	if r := p.run(t, "key", "bootstrap", "--sandbox", "demo", "--out", keyFile); r.code != 0 {
		t.Fatalf("bootstrap: %+v", r)
	}
	mount := t.TempDir()
	if err := os.MkdirAll(filepath.Join(mount, ".coily", "requests"), 0o700); err != nil {
		t.Fatal(err)
	}
	b := startRelayBridge(t, p, mount)
	cmd := exec.Command(coilyBin, "exec", "--", "/bin/sleep", "60")
	cmd.Env = append(os.Environ(), "SANDBOX_RUNTIME=1", "COILY_KEY_FILE="+keyFile, "COILY_MOUNT="+mount)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	select {
	case <-b.relayed:
	case <-time.After(20 * time.Second):
		t.Fatal("the request never reached the bridge")
	}
	// Interrupt once the command runs, so the teardown has something to
	// cancel.
	for deadline := time.Now().Add(20 * time.Second); ; {
		if r := p.run(t, "status"); strings.Contains(r.stdout, "running:     1") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the relayed command never started")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	var ee *exec.ExitError
	// Interrupted, coily exec exits as the tool would have: 128+SIGINT.
	if err := cmd.Wait(); !errors.As(err, &ee) || ee.ExitCode() != 130 {
		t.Fatalf("interrupted exec: %v, stderr %q", err, stderr.String())
	}
	select {
	case cancelled := <-b.torn:
		if !cancelled {
			t.Fatal("the teardown cancelled nothing")
		}
	case <-time.After(20 * time.Second):
		t.Fatal("no teardown reached the server")
	}
}
