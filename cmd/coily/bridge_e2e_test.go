package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"coily.dev/coily/bridge"
	"coily.dev/coily/client"
	"coily.dev/coily/descriptor"
	"coily.dev/coily/internal/testlog"
	coilyv1 "coily.dev/coily/proto/coily/v1"
)

// bridgeE2EPolicy lets the local operator issue keys and relay for sandbox
// "demo", whose relayed requests may run /bin/echo.
const bridgeE2EPolicy = `version: 1
roles:
  operator:
    permissions: [status, relay, keys]
    sandboxes: [demo]
  demo-sandbox:
    permissions: [exec]
    commands: [echo]
grants:
  - principals: ["sandbox:demo"]
    roles: [demo-sandbox]
commands:
  - {name: echo, binary: /bin/echo, args: ["**"], flags: any, sandbox: native}
`

// bridgeE2ERequest is a signed request file for sandbox demo.
func bridgeE2ERequest(t *testing.T, key []byte, id string, argv ...string) []byte {
	t.Helper()
	nonce := make([]byte, 18)
	if _, err := rand.Read(nonce); err != nil {
		t.Fatal(err)
	}
	data, err := descriptor.MarshalRequest(&descriptor.Request{ID: id, CreatedAt: time.Now().UTC(),
		Nonce: base64.RawURLEncoding.EncodeToString(nonce), Sandbox: "demo", Argv: argv}, key)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// bridgeE2EPut writes a request the protocol's way: into tmp/, then
// renamed into requests/.
func bridgeE2EPut(t *testing.T, mount, id string, data []byte) {
	t.Helper()
	tmp := descriptor.Path(mount, descriptor.TmpDir, id+".part")
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, descriptor.Path(mount, descriptor.RequestsDir, descriptor.FileName(id))); err != nil {
		t.Fatal(err)
	}
}

// bridgeE2EAnswer waits for the response to id, reads it and deletes it
// (as the sandbox's client does).
func bridgeE2EAnswer(t *testing.T, mount, id string, bridgeLog fmt.Stringer) *descriptor.Response {
	t.Helper()
	p := descriptor.Path(mount, descriptor.ResponsesDir, descriptor.FileName(id))
	deadline := time.Now().Add(20 * time.Second)
	for {
		data, err := os.ReadFile(p)
		if err == nil {
			r, err := descriptor.ParseResponse(data)
			if err != nil {
				t.Fatalf("response %s: %v\n%s", id, err, data)
			}
			if err := os.Remove(p); err != nil {
				t.Fatal(err)
			}
			return r
		}
		if time.Now().After(deadline) {
			t.Fatalf("no response to %s; bridge log:\n%s", id, bridgeLog)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestCLIBridgeRelaysToServer(t *testing.T) {
	dir := shortDir(t)
	pol := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(pol, []byte(bridgeE2EPolicy), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startServe(t, dir, pol)

	c, err := client.DialLocal(p.socket)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	issued, err := c.API.IssueKey(ctx, &coilyv1.IssueKeyRequest{Sandbox: "demo"})
	if err != nil {
		t.Fatalf("IssueKey: %v", err)
	}
	key := issued.GetKey().GetSecret()

	mount := shortDir(t)
	bridgeLog := new(testlog.Buffer)
	cmd := exec.Command(coilyBin, "--socket", p.socket, "bridge", "--mount", mount+"=demo")
	cmd.Stdout, cmd.Stderr = bridgeLog, bridgeLog
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = cmd.Process.Kill()
			<-exited
		}
	})

	// The bridge creates the protocol directories.
	deadline := time.Now().Add(15 * time.Second)
	for {
		if _, err := os.Stat(descriptor.Path(mount, descriptor.TmpDir, "")); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the bridge did not create .coily/; log:\n%s", bridgeLog)
		}
		time.Sleep(10 * time.Millisecond)
	}

	id := descriptor.NewID()
	bridgeE2EPut(t, mount, id, bridgeE2ERequest(t, key, id, "/bin/echo", "hi"))
	r := bridgeE2EAnswer(t, mount, id, bridgeLog)
	if out, _ := r.Stdout(); r.Outcome != descriptor.OutcomeExit || r.ExitCode != 0 || string(out) != "hi\n" {
		t.Fatalf("response: outcome %q code %q message %q exit %d stdout %q; want exit 0, \"hi\\n\"",
			r.Outcome, r.Code, r.Message, r.ExitCode, out)
	}
	if _, err := os.Lstat(descriptor.Path(mount, descriptor.RequestsDir, descriptor.FileName(id))); !os.IsNotExist(err) {
		t.Fatalf("the answered request is still there: %v", err)
	}

	// A tampered copy (another id, one argument changed after signing).
	id2 := descriptor.NewID()
	signed := bridgeE2ERequest(t, key, id2, "/bin/echo", "hi")
	tampered := bytes.Replace(signed, []byte(`"hi"`), []byte(`"ho"`), 1)
	if bytes.Equal(signed, tampered) {
		t.Fatal("could not tamper with the request")
	}
	bridgeE2EPut(t, mount, id2, tampered)
	r = bridgeE2EAnswer(t, mount, id2, bridgeLog)
	if r.Outcome != descriptor.OutcomeRefused || r.Code != "hmac-fail" {
		t.Fatalf("tampered request: outcome %q code %q message %q; want refused hmac-fail", r.Outcome, r.Code, r.Message)
	}

	// Still serving.
	id3 := descriptor.NewID()
	bridgeE2EPut(t, mount, id3, bridgeE2ERequest(t, key, id3, "/bin/echo", "again"))
	r = bridgeE2EAnswer(t, mount, id3, bridgeLog)
	if out, _ := r.Stdout(); r.Outcome != descriptor.OutcomeExit || string(out) != "again\n" {
		t.Fatalf("third request: outcome %q code %q stdout %q", r.Outcome, r.Code, out)
	}

	// SIGTERM stops it cleanly.
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		stopped = true
		if err != nil {
			t.Fatalf("bridge exited with %v; log:\n%s", err, bridgeLog)
		}
	case <-time.After(15 * time.Second):
		t.Fatalf("the bridge did not stop on SIGTERM; log:\n%s", bridgeLog)
	}
}

func TestCLIBridgeMountFlags(t *testing.T) {
	for _, tt := range []struct {
		spec, dir, sandbox, err string
	}{
		{spec: "/srv/share/Demo", dir: "/srv/share/Demo", sandbox: "demo"},
		{spec: "/srv/share/x=box-1", dir: "/srv/share/x", sandbox: "box-1"},
		{spec: "/srv/a=b/c=demo", dir: "/srv/a=b/c", sandbox: "demo"},
		{spec: "/srv/share/My Folder", err: "not a sandbox name"},
		{spec: "/srv/share/x=Bad", err: "must match"},
		{spec: "=demo", err: "no directory"},
	} {
		m, err := parseMount(tt.spec)
		switch {
		case tt.err != "" && (err == nil || !bytes.Contains([]byte(err.Error()), []byte(tt.err))):
			t.Errorf("parseMount(%q): %v; want an error with %q", tt.spec, err, tt.err)
		case tt.err == "" && (err != nil || m.Dir != tt.dir || m.Sandbox != tt.sandbox):
			t.Errorf("parseMount(%q) = %+v, %v; want %s=%s", tt.spec, m, err, tt.dir, tt.sandbox)
		}
	}
	// No mount at all is a usage error.
	if r := runCoily(t, nil, "bridge"); r.code != 2 {
		t.Errorf("coily bridge without --mount: code %d, want 2", r.code)
	}
}

// TestCLIBridgeRefusesUnsafeMount: a mount named in the environment whose
// requests/ is a symbolic link stops the bridge before it serves anything.
func TestCLIBridgeRefusesUnsafeMount(t *testing.T) {
	mount := shortDir(t)
	if err := os.MkdirAll(filepath.Join(mount, descriptor.DirName), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(t.TempDir(), filepath.Join(mount, descriptor.DirName, descriptor.RequestsDir)); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(coilyBin, "--socket", filepath.Join(shortDir(t), "none.sock"), "bridge")
	cmd.Env = append(os.Environ(), "COILY_BRIDGE_MOUNTS="+mount+"=demo")
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !bytes.Contains(out, []byte("requests: is a symbolic link")) {
		t.Fatalf("coily bridge: %v\n%s", err, out)
	}
}

// TestCLIBridgeRelayerErrors: the client's Relayer tells the server's
// definitive word (a *bridge.Refusal with its code) from a server it cannot
// reach (transient).
func TestCLIBridgeRelayerErrors(t *testing.T) {
	dir := shortDir(t)
	pol := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(pol, []byte(bridgeE2EPolicy), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startServe(t, dir, pol)
	c, err := client.DialLocal(p.socket)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	id := descriptor.NewID()

	_, err = bridge.NewGRPCRelayer(c.API).Relay(ctx, "other", id, []byte("{}"))
	var ref *bridge.Refusal
	if !errors.As(err, &ref) || ref.Code != "permission-denied" {
		t.Fatalf("relay for a sandbox not granted: %v; want a permission-denied refusal", err)
	}
	err = bridge.NewGRPCRelayer(c.API).Teardown(ctx, "other", id, []byte("{}"))
	if !errors.As(err, &ref) || ref.Code != "permission-denied" {
		t.Fatalf("teardown for a sandbox not granted: %v; want a permission-denied refusal", err)
	}
	// A descriptor the server cannot read is answered, not refused.
	resp, err := bridge.NewGRPCRelayer(c.API).Relay(ctx, "demo", id, []byte("{}"))
	if err != nil {
		t.Fatal(err)
	}
	if r, err := descriptor.ParseResponse(resp); err != nil || r.Outcome != descriptor.OutcomeRefused || r.Code != "bad-request" {
		t.Fatalf("response %s (%v); want a bad-request refusal", resp, err)
	}

	dead, err := client.DialLocal(filepath.Join(dir, "nobody-listens.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer dead.Close()
	if _, err := bridge.NewGRPCRelayer(dead.API).Relay(ctx, "demo", id, []byte("{}")); err == nil || errors.As(err, &ref) {
		t.Fatalf("relay to an unreachable server: %v; want a transient error", err)
	}
	gone, stop := context.WithCancel(ctx)
	stop()
	if _, err := bridge.NewGRPCRelayer(c.API).Relay(gone, "demo", id, []byte("{}")); err == nil || errors.As(err, &ref) {
		t.Fatalf("relay with a cancelled context: %v; want a transient error", err)
	}
}
