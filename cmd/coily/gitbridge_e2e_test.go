package main

import (
	"bytes"
	"crypto/rand"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"coily.dev/coily/client/folder"
	"coily.dev/coily/descriptor"
	"coily.dev/coily/internal/testlog"
)

// gitBridge is a sandbox's shared folder served by a real `coily bridge`
// for sandbox demo, and the sandbox's key file.
type gitBridge struct {
	mount, keyFile string
	key            folder.KeyFile
	log            *testlog.Buffer
}

func (e *gitProxyEnv) startGitBridge() *gitBridge {
	t := e.t
	t.Helper()
	b := &gitBridge{mount: shortDir(t), keyFile: filepath.Join(t.TempDir(), "demo.key"), log: new(testlog.Buffer)}
	if r := e.coily("key", "bootstrap", "--sandbox", "demo", "--out", b.keyFile); r.code != 0 {
		t.Fatalf("key bootstrap: %+v", r)
	}
	key, err := folder.ReadKeyFile(b.keyFile)
	if err != nil {
		t.Fatal(err)
	}
	b.key = key
	cmd := exec.Command(coilyBin, "--socket", e.socket, "bridge", "--mount", b.mount+"=demo")
	cmd.Stdout, cmd.Stderr = b.log, b.log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-exited })
	deadline := time.Now().Add(15 * time.Second)
	for {
		if _, err := os.Stat(descriptor.Path(b.mount, descriptor.TmpDir, "")); err == nil {
			return b
		}
		if time.Now().After(deadline) {
			t.Fatalf("the bridge did not create .coily/; log:\n%s", b.log)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// sandboxEnv is the agent's environment inside the sandbox: no socket,
// the shared folder and the key instead.
func (e *gitProxyEnv) sandboxEnv(b *gitBridge) []string {
	env := slices.DeleteFunc(e.agentEnv(), func(kv string) bool { return strings.HasPrefix(kv, "COILY_SOCKET=") })
	return append(env, "SANDBOX_RUNTIME=1", "COILY_MOUNT="+b.mount, "COILY_KEY_FILE="+b.keyFile)
}

func (e *gitProxyEnv) sandboxGit(b *gitBridge, ok bool, dir string, args ...string) string {
	e.t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir, cmd.Env = dir, e.sandboxEnv(b)
	out, err := cmd.CombinedOutput()
	e.seen(string(out))
	if (err == nil) != ok {
		e.t.Fatalf("git %s in the sandbox: %v (want success %v)\n%s\nbridge:\n%s\nserver:\n%s", strings.Join(args, " "), err, ok, out, b.log, e.log)
	}
	return string(out)
}

// exchange writes a git exchange signed with the sandbox's key (changed
// by tamper, when set) into the folder and returns the bridge's answer.
func (b *gitBridge) exchange(t *testing.T, d *descriptor.Request, tamper func([]byte) []byte) (*descriptor.Response, []byte) {
	t.Helper()
	data, err := descriptor.MarshalRequest(d, b.key.Key)
	if err != nil {
		t.Fatal(err)
	}
	if tamper != nil {
		data = tamper(data)
	}
	bridgeE2EPut(t, b.mount, d.ID, data)
	r := bridgeE2EAnswer(t, b.mount, d.ID, b.log)
	return r, data
}

// TestGitProxyBridgeSandbox: an agent in a network-less sandbox, whose
// only way out is its shared folder, clones, pushes a new branch and is
// refused a force push, with plain git (git-remote-coily carrying each
// request as a signed git exchange through a real bridge to the real
// server). A replayed exchange gets its recorded answer and runs once; a
// copy with its nonce, and one with its body changed, are refused.
func TestGitProxyBridgeSandbox(t *testing.T) {
	e := startGitProxy(t, "")
	b := e.startGitBridge()
	work := t.TempDir()
	// In the sandbox, with COILY_SERVER set as an agent machine would
	// have it: setup still writes coily::, which takes the folder.
	if r := runCoilyGit(t, work, append(e.sandboxEnv(b), "COILY_SERVER=coily.example.ts.net"), "git", "setup", "--global", "--host", e.host); r.code != 0 {
		t.Fatalf("git setup: %+v", r)
	}
	app := filepath.Join(work, "app")
	e.sandboxGit(b, true, work, "clone", "--quiet", e.url("owner/app"), app)
	e.sandboxGit(b, true, app, "checkout", "--quiet", "-b", "agent/s")
	e.sandboxGit(b, true, app, "commit", "--quiet", "--allow-empty", "-m", "from the sandbox")
	e.sandboxGit(b, true, app, "push", "--quiet", "origin", "agent/s")
	head := strings.TrimSpace(e.sandboxGit(b, true, app, "rev-parse", "HEAD"))
	if got := e.up.Ref(t, "owner/app", "refs/heads/agent/s"); got != head {
		t.Fatalf("agent/s upstream is %q, want %q", got, head)
	}
	pushes := e.gitRecords("git.push")
	last := pushes[len(pushes)-1]
	if last.Principal != "sandbox:demo" || last.Transport != "relay" || last.RelayID == "" || last.Decision != "allow" {
		t.Fatalf("the sandbox's push is not audited as its own: %+v", last)
	}

	e.sandboxGit(b, true, app, "commit", "--quiet", "--amend", "--allow-empty", "-m", "amended")
	out := e.sandboxGit(b, false, app, "push", "--force", "origin", "agent/s")
	if !strings.Contains(out, "does not allow a force") {
		t.Fatalf("the force push's refusal: %s", out)
	}
	if got := e.up.Ref(t, "owner/app", "refs/heads/agent/s"); got != head {
		t.Fatalf("a refused force push moved agent/s to %q", got)
	}

	// One exchange, relayed again: the same answer, byte for byte, and
	// the proxy ran it once.
	d := &descriptor.Request{ID: descriptor.NewID(), CreatedAt: time.Now().UTC(), Nonce: "replayreplayreplayreplay01", Sandbox: "demo",
		Git: &descriptor.GitExchange{Method: "GET", Path: "/git/" + e.host + "/owner/app/info/refs", Query: "service=git-receive-pack"}}
	before := len(e.gitRecords("git.push")) + len(e.gitRecords("call"))
	first, data := b.exchange(t, d, nil)
	if first.Outcome != descriptor.OutcomeHTTP || first.Git.Status != 200 || !bytes.Contains(first.Git.Body, []byte("refs/heads/agent/s")) {
		t.Fatalf("the exchange's answer: %+v", first)
	}
	ran := len(e.gitRecords("git.push")) + len(e.gitRecords("call"))
	bridgeE2EPut(t, b.mount, d.ID, data)
	again := bridgeE2EAnswer(t, b.mount, d.ID, b.log)
	if again.Outcome != descriptor.OutcomeHTTP || !bytes.Equal(again.Git.Body, first.Git.Body) {
		t.Fatalf("the replayed exchange's answer: %+v", again)
	}
	if now := len(e.gitRecords("git.push")) + len(e.gitRecords("call")); now != ran {
		t.Fatalf("the replayed exchange ran again: %d records, then %d (before %d)", ran, now, before)
	}
	// The same exchange under a new id keeps its nonce: refused.
	d.ID = descriptor.NewID()
	if r, _ := b.exchange(t, d, nil); r.Outcome != descriptor.OutcomeRefused || r.Code != "replay-detected" {
		t.Fatalf("a copy with a used nonce: %+v", r)
	}
	// A body changed after signing: refused, the proxy never sees it.
	d = &descriptor.Request{ID: descriptor.NewID(), CreatedAt: time.Now().UTC(), Nonce: "tampertampertampertamper01", Sandbox: "demo",
		Git: &descriptor.GitExchange{Method: "POST", Path: "/git/" + e.host + "/owner/app/git-upload-pack", Body: []byte("0000")}}
	r, _ := b.exchange(t, d, func(data []byte) []byte {
		out := bytes.Replace(data, []byte(`"MDAwMA=="`), []byte(`"MDAwMQ=="`), 1)
		if bytes.Equal(out, data) {
			t.Fatal("could not tamper with the body")
		}
		return out
	})
	if r.Outcome != descriptor.OutcomeRefused || r.Code != "hmac-fail" {
		t.Fatalf("a tampered body: %+v", r)
	}
}

// TestGitProxyBridgeLargeClone: a clone through the folder of a
// repository whose pack is larger than an answer's first bound (2 MiB),
// 4 MiB of random blob: the answer travels whole, and the work tree has
// the blob byte for byte.
func TestGitProxyBridgeLargeClone(t *testing.T) {
	e := startGitProxy(t, "")
	b := e.startGitBridge()
	blob := make([]byte, 4<<20)
	if _, err := rand.Read(blob); err != nil {
		t.Fatal(err)
	}
	seed := filepath.Join(t.TempDir(), "seed")
	gitOut(t, "clone", "--quiet", e.up.Dir("owner/app"), seed)
	if err := os.WriteFile(filepath.Join(seed, "blob"), blob, 0o644); err != nil {
		t.Fatal(err)
	}
	gitOut(t, "-C", seed, "add", "blob")
	gitOut(t, "-C", seed, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "--quiet", "-m", "a large blob")
	gitOut(t, "-C", seed, "push", "--quiet", "origin", "HEAD:main")

	work := t.TempDir()
	if r := runCoilyGit(t, work, e.sandboxEnv(b), "git", "setup", "--global", "--host", e.host); r.code != 0 {
		t.Fatalf("git setup: %+v", r)
	}
	app := filepath.Join(work, "app")
	e.sandboxGit(b, true, work, "clone", "--quiet", e.url("owner/app"), app)
	got, err := os.ReadFile(filepath.Join(app, "blob"))
	if err != nil || !bytes.Equal(got, blob) {
		t.Fatalf("the cloned blob: %d bytes, %v", len(got), err)
	}
}
