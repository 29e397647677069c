package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"coily.dev/coily/client"
	"coily.dev/coily/descriptor"
	"coily.dev/coily/internal/testlog"
	coilyv1 "coily.dev/coily/proto/coily/v1"
)

// relayE2EPolicy lets the local operator relay for sandbox demo, whose
// requests may run /bin/sh and /bin/echo.
const relayE2EPolicy = `version: 1
limits: {concurrency: 8}
roles:
  operator:
    permissions: [status, relay, keys]
    sandboxes: [demo]
  demo-sandbox:
    permissions: [exec]
    commands: [echo, sh]
grants:
  - principals: ["sandbox:demo"]
    roles: [demo-sandbox]
commands:
  - {name: echo, binary: /bin/echo, args: ["**"], flags: any, sandbox: native}
  - {name: sh, binary: /bin/sh, args: ["**"], flags: any, sandbox: native}
`

// relayRig is a server, the demo sandbox's key and a folder for it.
type relayRig struct {
	dir, pol, mount string
	serve           *serveProc
	key             []byte
}

func newRelayRig(t *testing.T) *relayRig {
	t.Helper()
	r := &relayRig{dir: shortDir(t), mount: shortDir(t)}
	r.pol = filepath.Join(r.dir, "policy.yaml")
	if err := os.WriteFile(r.pol, []byte(relayE2EPolicy), 0o600); err != nil {
		t.Fatal(err)
	}
	r.serve = startServe(t, r.dir, r.pol)
	c, err := client.DialLocal(r.serve.socket)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	k, err := c.API.IssueKey(context.Background(), &coilyv1.IssueKeyRequest{Sandbox: "demo"})
	if err != nil {
		t.Fatal(err)
	}
	r.key = k.GetKey().GetSecret()
	return r
}

// bridgeProc is a running `coily bridge`.
type bridgeProc struct {
	cmd    *exec.Cmd
	log    *testlog.Buffer
	exited chan struct{}
}

func (r *relayRig) startBridge(t *testing.T) *bridgeProc {
	t.Helper()
	b := &bridgeProc{log: new(testlog.Buffer), exited: make(chan struct{})}
	b.cmd = exec.Command(coilyBin, "--socket", r.serve.socket, "bridge", "--mount", r.mount+"=demo", "--rescan", "200ms")
	b.cmd.Stdout, b.cmd.Stderr = b.log, b.log
	if err := b.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = b.cmd.Wait(); close(b.exited) }()
	t.Cleanup(b.kill)
	waitDir(t, descriptor.Path(r.mount, descriptor.TmpDir, ""))
	return b
}

// kill SIGKILLs the bridge, as a crash would.
func (b *bridgeProc) kill() {
	_ = b.cmd.Process.Kill()
	<-b.exited
}

// kill SIGKILLs the server, as a crash would.
func (p *serveProc) kill() {
	_ = p.cmd.Process.Kill()
	_ = p.cmd.Wait()
}

func waitFile(t *testing.T, path, what string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		if data, err := os.ReadFile(path); err == nil && len(data) > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func runs(t *testing.T, counter string) int {
	t.Helper()
	data, _ := os.ReadFile(counter)
	return strings.Count(string(data), "run")
}

// The bridge killed between relay and answer: a new bridge relays again,
// waits for the running command and writes its answer; it ran once.
func TestCLIRelayBridgeKilledMidRequest(t *testing.T) {
	r := newRelayRig(t)
	b := r.startBridge(t)
	counter := filepath.Join(r.dir, "runs")
	release := filepath.Join(r.dir, "release")
	id := descriptor.NewID()
	bridgeE2EPut(t, r.mount, id, bridgeE2ERequest(t, r.key, id, "/bin/sh", "-c",
		"echo run >> "+counter+"; while [ ! -e "+release+" ]; do sleep 0.05; done; echo done"))
	waitFile(t, counter, "the command to start", 20*time.Second)
	b.kill()
	b2 := r.startBridge(t)
	if err := os.WriteFile(release, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	resp := bridgeE2EAnswer(t, r.mount, id, b2.log)
	if out, _ := resp.Stdout(); resp.Outcome != descriptor.OutcomeExit || string(out) != "done\n" {
		t.Fatalf("response: %s %s %s %q", resp.Outcome, resp.Code, resp.Message, out)
	}
	if n := runs(t, counter); n != 1 {
		t.Fatalf("the command ran %d times", n)
	}
}

// The server killed mid-exec: after its restart the request is answered
// "interrupted" (it may have had effects) and never run again; a request
// written while the server was down runs normally.
func TestCLIRelayServerKilledMidExec(t *testing.T) {
	r := newRelayRig(t)
	b := r.startBridge(t)
	counter := filepath.Join(r.dir, "runs")
	id := descriptor.NewID()
	bridgeE2EPut(t, r.mount, id, bridgeE2ERequest(t, r.key, id, "/bin/sh", "-c", "echo run >> "+counter+"; sleep 30"))
	waitFile(t, counter, "the command to start", 20*time.Second)
	r.serve.kill()
	// Written while the server is down: the bridge keeps retrying it.
	later := descriptor.NewID()
	bridgeE2EPut(t, r.mount, later, bridgeE2ERequest(t, r.key, later, "/bin/echo", "later"))
	r.serve = startServe(t, r.dir, r.pol)
	resp := bridgeE2EAnswer(t, r.mount, id, b.log)
	if resp.Outcome != descriptor.OutcomeRefused || resp.Code != "internal" || !strings.Contains(resp.Message, "not run again") {
		t.Fatalf("interrupted request: %s %s %s", resp.Outcome, resp.Code, resp.Message)
	}
	resp = bridgeE2EAnswer(t, r.mount, later, b.log)
	if out, _ := resp.Stdout(); string(out) != "later\n" {
		t.Fatalf("request written while down: %s %s %s %q", resp.Outcome, resp.Code, resp.Message, out)
	}
	// The bridge relays the first request again (as after its own
	// restart): the recorded answer, no second run.
	bridgeE2EPut(t, r.mount, id, bridgeE2ERequest2(t, r, id, counter))
	resp = bridgeE2EAnswer(t, r.mount, id, b.log)
	if resp.Code != "internal" && resp.Code != "replay-detected" {
		t.Fatalf("repeat: %s %s", resp.Code, resp.Message)
	}
	if n := runs(t, counter); n != 1 {
		t.Fatalf("the command ran %d times", n)
	}
}

// bridgeE2ERequest2 re-signs a request for the same id (a different nonce
// and time: a different body, hence replay-detected, never a run).
func bridgeE2ERequest2(t *testing.T, r *relayRig, id, counter string) []byte {
	return bridgeE2ERequest(t, r.key, id, "/bin/sh", "-c", "echo run >> "+counter)
}

// The hostile corpus, through a real bridge and server: each file is
// answered with the right refusal or safely removed, and the bridge keeps
// serving.
func TestCLIBridgeHostileCorpus(t *testing.T) {
	r := newRelayRig(t)
	b := r.startBridge(t)
	reqDir := descriptor.Path(r.mount, descriptor.RequestsDir, "")
	waitDir(t, reqDir)
	outside := filepath.Join(r.dir, "outside.txt")
	if err := os.WriteFile(outside, []byte("precious"), 0o600); err != nil {
		t.Fatal(err)
	}
	signed := func(argv ...string) (string, []byte) {
		id := descriptor.NewID()
		return id, bridgeE2ERequest(t, r.key, id, argv...)
	}
	refusedWith := func(id, code string) {
		t.Helper()
		resp := bridgeE2EAnswer(t, r.mount, id, b.log)
		if resp.Outcome != descriptor.OutcomeRefused || resp.Code != code {
			t.Fatalf("%s: %s %s (%s), want refused %s", id, resp.Outcome, resp.Code, resp.Message, code)
		}
	}

	id, data := signed("/bin/echo", "hi")
	bridgeE2EPut(t, r.mount, id, bytes.Replace(data, []byte(`"hi"`), []byte(`"ho"`), 1))
	refusedWith(id, "hmac-fail") // tampered body

	id = descriptor.NewID()
	wrong, _ := descriptor.MarshalRequest(&descriptor.Request{ID: id, CreatedAt: time.Now().UTC(), Nonce: strings.Repeat("w", 32), Sandbox: "demo", Argv: []string{"/bin/echo"}}, make([]byte, 32))
	bridgeE2EPut(t, r.mount, id, wrong)
	refusedWith(id, "hmac-fail") // wrong key

	first, data := signed("/bin/echo", "once")
	bridgeE2EPut(t, r.mount, first, data)
	bridgeE2EAnswer(t, r.mount, first, b.log)
	replay := descriptor.NewID()
	bridgeE2EPut(t, r.mount, replay, resign(t, r, data, first, replay))
	refusedWith(replay, "replay-detected") // replayed nonce under a new id

	for _, skew := range []time.Duration{-10 * time.Minute, 10 * time.Minute} {
		id = descriptor.NewID()
		old, _ := descriptor.MarshalRequest(&descriptor.Request{ID: id, CreatedAt: time.Now().Add(skew).UTC(), Nonce: descriptor.NewID()[:32], Sandbox: "demo", Argv: []string{"/bin/echo"}}, r.key)
		bridgeE2EPut(t, r.mount, id, old)
		refusedWith(id, "stale-request") // stale, future-dated
	}

	id = descriptor.NewID()
	bridgeE2EPut(t, r.mount, id, []byte("version: 1\nversion: 1\n"))
	refusedWith(id, "bad-request") // duplicate keys

	id = descriptor.NewID()
	bomb := "a: &a [x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\nc: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]\ne: [*d, *d, *d, *d, *d, *d, *d, *d, *d]\n"
	bridgeE2EPut(t, r.mount, id, []byte(bomb))
	refusedWith(id, "bad-request") // alias bomb

	id = descriptor.NewID()
	bridgeE2EPut(t, r.mount, id, []byte("version: 1\nid: \"\xff\xfe\"\n"))
	refusedWith(id, "bad-request") // non-UTF-8

	id = descriptor.NewID()
	big := descriptor.Path(r.mount, descriptor.RequestsDir, descriptor.FileName(id))
	f, err := os.Create(big)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(100 << 20); err != nil {
		t.Fatal(err)
	}
	f.Close()
	refusedWith(id, "bad-request") // 100 MB

	// A response path pre-planted as a symlink to a file outside.
	id, data = signed("/bin/echo", "planted")
	if err := os.Symlink(outside, descriptor.Path(r.mount, descriptor.ResponsesDir, descriptor.FileName(id))); err != nil {
		t.Fatal(err)
	}
	bridgeE2EPut(t, r.mount, id, data)
	respPath := descriptor.Path(r.mount, descriptor.ResponsesDir, descriptor.FileName(id))
	deadline := time.Now().Add(20 * time.Second)
	for fi, err := os.Lstat(respPath); err != nil || !fi.Mode().IsRegular(); fi, err = os.Lstat(respPath) {
		if time.Now().After(deadline) {
			t.Fatal("the planted symlink was not replaced by a response")
		}
		time.Sleep(10 * time.Millisecond)
	}
	resp := bridgeE2EAnswer(t, r.mount, id, b.log)
	if out, _ := resp.Stdout(); string(out) != "planted\n" {
		t.Fatalf("planted response: %s %s", resp.Outcome, resp.Code)
	}
	if got, _ := os.ReadFile(outside); string(got) != "precious" {
		t.Fatalf("the file outside the mount was written: %q", got)
	}

	// A FIFO, ../ and overlong names: removed, never answered, never block.
	fifo := descriptor.NewID()
	if err := syscall.Mkfifo(filepath.Join(reqDir, descriptor.FileName(fifo)), 0o600); err != nil {
		t.Fatal(err)
	}
	refusedWith(fifo, "bad-request")
	for _, name := range []string{"..%2f..%2fescape.json", strings.Repeat("a", 250) + ".json", "x.json"} {
		if err := os.WriteFile(filepath.Join(reqDir, name), []byte("{}"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// A half-written file in tmp/ is not touched until renamed in.
	id, data = signed("/bin/echo", "whole")
	part := descriptor.Path(r.mount, descriptor.TmpDir, id+".part")
	if err := os.WriteFile(part, data[:len(data)/2], 0o600); err != nil {
		t.Fatal(err)
	}
	// Still serving: a valid request is answered (after the strays).
	ok, okData := signed("/bin/echo", "still")
	bridgeE2EPut(t, r.mount, ok, okData)
	if resp := bridgeE2EAnswer(t, r.mount, ok, b.log); resp.Outcome != descriptor.OutcomeExit {
		t.Fatalf("after the corpus: %s %s %s", resp.Outcome, resp.Code, resp.Message)
	}
	entries, _ := os.ReadDir(reqDir)
	if len(entries) != 0 {
		t.Fatalf("requests/ still holds %d entries (strays must be removed)", len(entries))
	}
	if _, err := os.Stat(descriptor.Path(r.mount, descriptor.ResponsesDir, descriptor.FileName(id))); err == nil {
		t.Fatal("the half-written request was answered")
	}
	if err := os.WriteFile(part, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(part, filepath.Join(reqDir, descriptor.FileName(id))); err != nil {
		t.Fatal(err)
	}
	if resp := bridgeE2EAnswer(t, r.mount, id, b.log); resp.Outcome != descriptor.OutcomeExit {
		t.Fatalf("completed request: %s %s %s", resp.Outcome, resp.Code, resp.Message)
	}
}

// resign signs a copy of data under a new id, keeping its nonce.
func resign(t *testing.T, r *relayRig, data []byte, oldID, newID string) []byte {
	t.Helper()
	d, _, err := descriptor.ParseRequest(data)
	if err != nil {
		t.Fatal(err)
	}
	d.ID, d.CreatedAtRaw = newID, ""
	out, err := descriptor.MarshalRequest(d, r.key)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func waitDir(t *testing.T, dir string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		if _, err := os.Stat(dir); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not appear", dir)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
