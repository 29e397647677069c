package bridge

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"coily.dev/coily/descriptor"
	"coily.dev/coily/internal/poll"
	"coily.dev/coily/internal/testlog"
)

// Every test must leave no goroutine behind: Run returns only once its
// workers and watchers have stopped.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// call is one call a fakeRelayer received.
type call struct {
	sandbox, id string
	data        []byte
}

// fakeRelayer records calls and answers with canned responses (a seam at
// the unit level: the end-to-end test in cmd/coily uses the real server).
type fakeRelayer struct {
	mu        sync.Mutex
	relays    []call
	teardowns []call
	// relay, when set, answers the nth (from 0) relay of id; else an exit
	// response with stdout "ok\n".
	relay    func(id string, n int) ([]byte, error)
	teardown func(id string) error
	running  int // relays in progress
	peak     int // most relays in progress at once
}

func (f *fakeRelayer) Relay(ctx context.Context, sandbox, id string, request []byte) ([]byte, error) {
	f.mu.Lock()
	n := 0
	for _, c := range f.relays {
		if c.id == id {
			n++
		}
	}
	f.relays = append(f.relays, call{sandbox, id, bytes.Clone(request)})
	f.running++
	f.peak = max(f.peak, f.running)
	fn := f.relay
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		f.running--
		f.mu.Unlock()
	}()
	if fn != nil {
		return fn(id, n)
	}
	return exitResponse(id, "ok\n"), nil
}

func (f *fakeRelayer) Teardown(ctx context.Context, sandbox, id string, teardown []byte) error {
	f.mu.Lock()
	f.teardowns = append(f.teardowns, call{sandbox, id, bytes.Clone(teardown)})
	fn := f.teardown
	f.mu.Unlock()
	if fn != nil {
		return fn(id)
	}
	return nil
}

func (f *fakeRelayer) relayed() []call {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.relays)
}

func (f *fakeRelayer) tornDown() []call {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.teardowns)
}

func exitResponse(id, stdout string) []byte {
	r := &descriptor.Response{ID: id, Outcome: descriptor.OutcomeExit}
	r.SetOutput([]byte(stdout), nil)
	out, err := descriptor.MarshalResponse(r)
	if err != nil {
		panic(err)
	}
	return out
}

// newMount returns a shared folder with its protocol directories.
func newMount(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, d := range descriptor.Dirs {
		if err := os.MkdirAll(filepath.Join(dir, descriptor.DirName, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

type running struct {
	log  *testlog.Buffer
	stop func() error
}

// start runs the bridge on the mounts until the test ends (or stop).
func start(t *testing.T, rel Relayer, cfg Config, dirs ...string) *running {
	t.Helper()
	r := &running{log: &testlog.Buffer{}}
	cfg.Relayer = rel
	cfg.Logger = slog.New(slog.NewTextHandler(io.MultiWriter(r.log, testlog.T(t)), &slog.HandlerOptions{Level: slog.LevelDebug}))
	for _, d := range dirs {
		cfg.Mounts = append(cfg.Mounts, Mount{Dir: d, Sandbox: "demo"})
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, cfg) }()
	var once sync.Once
	var err error
	r.stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case err = <-done:
			case <-time.After(10 * time.Second):
				err = errors.New("Run did not return within 10s of its context ending")
			}
		})
		return err
	}
	t.Cleanup(func() {
		if err := r.stop(); err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return r
}

// waitFor polls cond until it holds, failing the test after 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	poll.Until(t, 10*time.Second, what, cond)
}

func path(mount, d, name string) string { return descriptor.Path(mount, d, name) }

// put writes a file into dir the protocol's way: into tmp/, then renamed.
func put(t *testing.T, mount, d, name string, data []byte) {
	t.Helper()
	tmp := path(mount, descriptor.TmpDir, name+".part")
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path(mount, d, name)); err != nil {
		t.Fatal(err)
	}
}

func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

// response waits for responses/<id>.json and reads it.
func response(t *testing.T, mount, id string) *descriptor.Response {
	t.Helper()
	p := path(mount, descriptor.ResponsesDir, descriptor.FileName(id))
	waitFor(t, "response "+id, func() bool {
		fi, err := os.Lstat(p)
		return err == nil && fi.Mode().IsRegular()
	})
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	r, err := descriptor.ParseResponse(data)
	if err != nil {
		t.Fatalf("response %s: %v\n%s", id, err, data)
	}
	if r.ID != id {
		t.Fatalf("response %s carries id %s", id, r.ID)
	}
	return r
}

func wantRefused(t *testing.T, r *descriptor.Response, code string) {
	t.Helper()
	if r.Outcome != descriptor.OutcomeRefused || r.Code != code {
		t.Fatalf("response: outcome %q code %q message %q; want refused %q", r.Outcome, r.Code, r.Message, code)
	}
}

func wantOK(t *testing.T, r *descriptor.Response) {
	t.Helper()
	out, _ := r.Stdout()
	if r.Outcome != descriptor.OutcomeExit || string(out) != "ok\n" {
		t.Fatalf("response: outcome %q code %q stdout %q; want the fake's exit", r.Outcome, r.Code, out)
	}
}

func requestBody(id string) []byte { return []byte(`{"id":"` + id + `","argv":["/bin/echo"]}` + "\n") }

func TestHappyPath(t *testing.T) {
	mount := t.TempDir() // Run creates .coily and its directories
	rel := &fakeRelayer{}
	start(t, rel, Config{}, mount)
	waitFor(t, "the protocol directories", func() bool { return exists(path(mount, descriptor.TmpDir, "")) })
	for _, d := range append([]string{""}, descriptor.Dirs...) {
		fi, err := os.Lstat(filepath.Join(mount, descriptor.DirName, d))
		if err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 {
			t.Fatalf(".coily/%s: %v %v; want a directory, mode 0700", d, fi.Mode(), err)
		}
	}
	id := descriptor.NewID()
	body := requestBody(id)
	put(t, mount, descriptor.RequestsDir, descriptor.FileName(id), body)
	wantOK(t, response(t, mount, id))
	fi, err := os.Lstat(path(mount, descriptor.ResponsesDir, descriptor.FileName(id)))
	if err != nil || fi.Mode() != 0o600 {
		t.Fatalf("response mode %v (%v), want -rw-------", fi.Mode(), err)
	}
	waitFor(t, "the request to be deleted", func() bool { return !exists(path(mount, descriptor.RequestsDir, descriptor.FileName(id))) })
	calls := rel.relayed()
	if len(calls) != 1 || calls[0].sandbox != "demo" || calls[0].id != id || !bytes.Equal(calls[0].data, body) {
		t.Fatalf("relayed %+v; want one call for %s with the file's bytes", calls, id)
	}
	// A YAML request is answered as <id>.json too.
	id2 := descriptor.NewID()
	put(t, mount, descriptor.RequestsDir, id2+".yaml", []byte("id: "+id2+"\n"))
	wantOK(t, response(t, mount, id2))
	entries, _ := os.ReadDir(path(mount, descriptor.ResponsesDir, ""))
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), tempPrefix) {
			t.Errorf("temporary file %s left in responses/", e.Name())
		}
	}
}

func TestNamesOutsideGrammarDeletedUnread(t *testing.T) {
	id := descriptor.NewID()
	for _, name := range []string{"../" + id + ".json", id + "/x.json", "x.json", strings.ToUpper(id) + ".json"} {
		if _, ok := descriptor.IDFromName(name); ok {
			t.Fatalf("IDFromName(%q) accepted", name)
		}
	}
	mount := newMount(t)
	req := path(mount, descriptor.RequestsDir, "")
	strays := []string{
		"x.json",
		strings.ToUpper(descriptor.NewID()) + ".json",
		descriptor.NewID() + ".JSON",
		descriptor.NewID() + ".json.bak",
		descriptor.NewID() + ".txt",
		"." + descriptor.NewID() + ".json",
		"..x.json",
		strings.Repeat("a", 240) + ".json",
		descriptor.NewID() + "x.json",
		"a\nb.json",
	}
	for _, name := range strays {
		if err := os.WriteFile(filepath.Join(req, name), requestBody(id), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// A symbolic link with a stray name is deleted, not followed.
	outside := filepath.Join(t.TempDir(), "target")
	if err := os.WriteFile(outside, []byte("secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(req, "link.json")); err != nil {
		t.Fatal(err)
	}
	// A directory with a stray name is left alone.
	if err := os.Mkdir(filepath.Join(req, "subdir"), 0o700); err != nil {
		t.Fatal(err)
	}
	rel := &fakeRelayer{}
	r := start(t, rel, Config{}, mount)
	waitFor(t, "stray names to be deleted", func() bool {
		entries, _ := os.ReadDir(req)
		return len(entries) == 1 && entries[0].Name() == "subdir"
	})
	if data, err := os.ReadFile(outside); err != nil || string(data) != "secret" {
		t.Fatalf("symlink target: %q %v", data, err)
	}
	// A stray in teardowns/ goes too.
	if err := os.WriteFile(path(mount, descriptor.TeardownsDir, "x.yaml"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	ok := descriptor.NewID()
	put(t, mount, descriptor.RequestsDir, descriptor.FileName(ok), requestBody(ok))
	wantOK(t, response(t, mount, ok))
	waitFor(t, "the stray teardown to be deleted", func() bool { return !exists(path(mount, descriptor.TeardownsDir, "x.yaml")) })
	if calls := rel.relayed(); len(calls) != 1 || calls[0].id != ok {
		t.Fatalf("relayed %+v; want only %s", calls, ok)
	}
	if len(rel.tornDown()) != 0 {
		t.Fatal("a stray teardown was relayed")
	}
	if n := strings.Count(r.log.String(), "left a directory"); n != 1 {
		t.Errorf("the stray directory was logged %d times, want once", n)
	}
}

func TestSymlinkRequestRefused(t *testing.T) {
	mount := newMount(t)
	outside := filepath.Join(t.TempDir(), "outside.json")
	id := descriptor.NewID()
	if err := os.WriteFile(outside, requestBody(id), 0o600); err != nil {
		t.Fatal(err)
	}
	before, _ := os.Stat(outside)
	link := path(mount, descriptor.RequestsDir, descriptor.FileName(id))
	if err := os.Symlink(outside, link); err != nil {
		t.Fatal(err)
	}
	rel := &fakeRelayer{}
	start(t, rel, Config{}, mount)
	wantRefused(t, response(t, mount, id), descriptor.CodeBadRequest)
	waitFor(t, "the symlink to be deleted", func() bool { return !exists(link) })
	after, err := os.Stat(outside)
	data, _ := os.ReadFile(outside)
	if err != nil || !bytes.Equal(data, requestBody(id)) || !after.ModTime().Equal(before.ModTime()) {
		t.Fatalf("the link's target changed: %v", err)
	}
	if len(rel.relayed()) != 0 {
		t.Fatal("the target of a symlink was relayed")
	}
}

func TestFIFODoesNotBlock(t *testing.T) {
	mount := newMount(t)
	rel := &fakeRelayer{}
	start(t, rel, Config{}, mount)
	fifo := descriptor.NewID()
	fifoPath := path(mount, descriptor.RequestsDir, descriptor.FileName(fifo))
	if err := syscall.Mkfifo(fifoPath, 0o600); err != nil {
		t.Fatal(err)
	}
	id := descriptor.NewID()
	put(t, mount, descriptor.RequestsDir, descriptor.FileName(id), requestBody(id))
	wantOK(t, response(t, mount, id))
	wantRefused(t, response(t, mount, fifo), descriptor.CodeBadRequest)
	waitFor(t, "the FIFO to be deleted", func() bool { return !exists(fifoPath) })
	if calls := rel.relayed(); len(calls) != 1 || calls[0].id != id {
		t.Fatalf("relayed %+v; want only %s", calls, id)
	}
}

func TestHardLinkRefused(t *testing.T) {
	mount := newMount(t)
	id := descriptor.NewID()
	outside := filepath.Join(t.TempDir(), "outside.json") // on the same file system
	if err := os.WriteFile(outside, requestBody(id), 0o600); err != nil {
		t.Fatal(err)
	}
	link := path(mount, descriptor.RequestsDir, descriptor.FileName(id))
	if err := os.Link(outside, link); err != nil {
		t.Fatal(err)
	}
	rel := &fakeRelayer{}
	start(t, rel, Config{}, mount)
	wantRefused(t, response(t, mount, id), descriptor.CodeBadRequest)
	waitFor(t, "the hard link to be deleted", func() bool { return !exists(link) })
	data, err := os.ReadFile(outside)
	if err != nil || !bytes.Equal(data, requestBody(id)) {
		t.Fatalf("the linked file changed: %q %v", data, err)
	}
	if len(rel.relayed()) != 0 {
		t.Fatal("a hard-linked file was relayed")
	}
}

func TestHugeSparseFileNotRead(t *testing.T) {
	mount := newMount(t)
	rel := &fakeRelayer{}
	start(t, rel, Config{}, mount)
	id := descriptor.NewID()
	tmp := path(mount, descriptor.TmpDir, descriptor.FileName(id))
	f, err := os.Create(tmp)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(100 << 20); err != nil {
		t.Fatal(err)
	}
	f.Close()
	began := time.Now()
	if err := os.Rename(tmp, path(mount, descriptor.RequestsDir, descriptor.FileName(id))); err != nil {
		t.Fatal(err)
	}
	r := response(t, mount, id)
	if took := time.Since(began); took > time.Second {
		t.Errorf("answering a 100 MB file took %s", took)
	}
	wantRefused(t, r, descriptor.CodeBadRequest)
	if !strings.Contains(r.Message, "larger than") {
		t.Errorf("message %q does not say the file is too large", r.Message)
	}
	if len(rel.relayed()) != 0 {
		t.Fatal("an oversized file was relayed")
	}
}

func TestPlantedResponseSymlinkReplaced(t *testing.T) {
	mount := newMount(t)
	outside := filepath.Join(t.TempDir(), "victim")
	if err := os.WriteFile(outside, []byte("precious"), 0o600); err != nil {
		t.Fatal(err)
	}
	id := descriptor.NewID()
	resp := path(mount, descriptor.ResponsesDir, descriptor.FileName(id))
	if err := os.Symlink(outside, resp); err != nil {
		t.Fatal(err)
	}
	// A directory planted where an answer goes: the answer is dropped.
	blocked := descriptor.NewID()
	if err := os.Mkdir(path(mount, descriptor.ResponsesDir, descriptor.FileName(blocked)), 0o700); err != nil {
		t.Fatal(err)
	}
	rel := &fakeRelayer{}
	start(t, rel, Config{}, mount)
	put(t, mount, descriptor.RequestsDir, descriptor.FileName(blocked), requestBody(blocked))
	put(t, mount, descriptor.RequestsDir, descriptor.FileName(id), requestBody(id))
	wantOK(t, response(t, mount, id))
	if data, err := os.ReadFile(outside); err != nil || string(data) != "precious" {
		t.Fatalf("the planted link's target: %q %v", data, err)
	}
	waitFor(t, "the blocked request to be settled", func() bool {
		return !exists(path(mount, descriptor.RequestsDir, descriptor.FileName(blocked)))
	})
	if fi, err := os.Lstat(path(mount, descriptor.ResponsesDir, descriptor.FileName(blocked))); err != nil || !fi.IsDir() {
		t.Fatalf("the planted directory: %v %v", fi, err)
	}
	entries, _ := os.ReadDir(path(mount, descriptor.ResponsesDir, ""))
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), tempPrefix) {
			t.Errorf("temporary file %s left in responses/", e.Name())
		}
	}
}

func TestTmpIgnoredUntilRenamed(t *testing.T) {
	mount := newMount(t)
	rel := &fakeRelayer{}
	start(t, rel, Config{}, mount)
	id := descriptor.NewID()
	half := path(mount, descriptor.TmpDir, descriptor.FileName(id))
	body := requestBody(id)
	if err := os.WriteFile(half, body[:10], 0o600); err != nil {
		t.Fatal(err)
	}
	// Another request is answered meanwhile: the bridge is scanning.
	other := descriptor.NewID()
	put(t, mount, descriptor.RequestsDir, descriptor.FileName(other), requestBody(other))
	wantOK(t, response(t, mount, other))
	if !exists(half) || exists(path(mount, descriptor.ResponsesDir, descriptor.FileName(id))) || len(rel.relayed()) != 1 {
		t.Fatal("a file in tmp/ was touched")
	}
	if err := os.WriteFile(half, body, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(half, path(mount, descriptor.RequestsDir, descriptor.FileName(id))); err != nil {
		t.Fatal(err)
	}
	wantOK(t, response(t, mount, id))
	if calls := rel.relayed(); len(calls) != 2 || calls[1].id != id || !bytes.Equal(calls[1].data, body) {
		t.Fatalf("relayed %+v", calls)
	}
}

func TestTransientErrorsRetried(t *testing.T) {
	mount := newMount(t)
	rel := &fakeRelayer{relay: func(id string, n int) ([]byte, error) {
		if n < 3 {
			return nil, errors.New("server unavailable")
		}
		return exitResponse(id, "ok\n"), nil
	}}
	start(t, rel, Config{}, mount)
	id := descriptor.NewID()
	began := time.Now()
	put(t, mount, descriptor.RequestsDir, descriptor.FileName(id), requestBody(id))
	wantOK(t, response(t, mount, id))
	// Backoff: 250ms, 500ms, 1s before the fourth try.
	if took := time.Since(began); took < 1700*time.Millisecond {
		t.Errorf("answered after %s: the retries did not back off", took)
	}
	if n := len(rel.relayed()); n != 4 {
		t.Errorf("relayed %d times, want 4", n)
	}
	waitFor(t, "the request to be deleted", func() bool { return !exists(path(mount, descriptor.RequestsDir, descriptor.FileName(id))) })
}

func TestRefusalWritten(t *testing.T) {
	mount := newMount(t)
	rel := &fakeRelayer{relay: func(id string, n int) ([]byte, error) {
		return nil, &Refusal{Code: "permission-denied", Message: "local:bob may not relay for sandbox \"demo\"", AuditID: "A000000000042"}
	}}
	start(t, rel, Config{}, mount)
	id := descriptor.NewID()
	put(t, mount, descriptor.RequestsDir, descriptor.FileName(id), requestBody(id))
	r := response(t, mount, id)
	wantRefused(t, r, "permission-denied")
	if r.Message != "local:bob may not relay for sandbox \"demo\"" || r.AuditID != "A000000000042" {
		t.Errorf("message %q, audit_id %q", r.Message, r.AuditID)
	}
	waitFor(t, "the request to be deleted", func() bool { return !exists(path(mount, descriptor.RequestsDir, descriptor.FileName(id))) })
	if n := len(rel.relayed()); n != 1 {
		t.Errorf("relayed %d times, want 1 (a refusal is definitive)", n)
	}
	// A code the protocol cannot carry still yields a valid response.
	rel.mu.Lock()
	rel.relay = func(string, int) ([]byte, error) { return nil, &Refusal{Code: "Bad Code", Message: "x\x00y"} }
	rel.mu.Unlock()
	id2 := descriptor.NewID()
	put(t, mount, descriptor.RequestsDir, descriptor.FileName(id2), requestBody(id2))
	wantRefused(t, response(t, mount, id2), "internal")
}

func TestTeardownRelayed(t *testing.T) {
	mount := newMount(t)
	// Unreachable once (kept and retried), then relayed.
	tries := 0
	rel := &fakeRelayer{teardown: func(id string) error {
		if tries++; tries == 1 {
			return errors.New("server unavailable")
		}
		return nil
	}}
	start(t, rel, Config{}, mount)
	id := descriptor.NewID()
	body := []byte(`{"id":"` + id + `"}` + "\n")
	td := path(mount, descriptor.TeardownsDir, descriptor.FileName(id))
	put(t, mount, descriptor.TeardownsDir, descriptor.FileName(id), body)
	waitFor(t, "the teardown to be deleted", func() bool { return !exists(td) })
	calls := rel.tornDown()
	if len(calls) != 2 || calls[1].id != id || calls[1].sandbox != "demo" || !bytes.Equal(calls[1].data, body) {
		t.Fatalf("teardowns %+v, want the same one twice", calls)
	}
	if exists(path(mount, descriptor.ResponsesDir, descriptor.FileName(id))) {
		t.Fatal("a teardown was answered")
	}
	// Too large: deleted unrelayed.
	big := descriptor.NewID()
	put(t, mount, descriptor.TeardownsDir, descriptor.FileName(big), bytes.Repeat([]byte(" "), MaxTeardownSize+1))
	waitFor(t, "the large teardown to be deleted", func() bool {
		return !exists(path(mount, descriptor.TeardownsDir, descriptor.FileName(big)))
	})
	if n := len(rel.tornDown()); n != 2 {
		t.Fatalf("%d teardowns relayed, want 2", n)
	}
	// Refused by the server: deleted after one try.
	rel.mu.Lock()
	rel.teardown = func(string) error { return &Refusal{Code: "hmac-fail", Message: "no"} }
	rel.mu.Unlock()
	ref := descriptor.NewID()
	put(t, mount, descriptor.TeardownsDir, descriptor.FileName(ref), body)
	waitFor(t, "the refused teardown to be deleted", func() bool {
		return !exists(path(mount, descriptor.TeardownsDir, descriptor.FileName(ref)))
	})
	if n := len(rel.tornDown()); n != 3 {
		t.Fatalf("%d teardowns relayed, want 3", n)
	}
}

func TestTeardownNotStuckBehindRequests(t *testing.T) {
	mount := newMount(t)
	release := make(chan struct{})
	rel := &fakeRelayer{relay: func(id string, n int) ([]byte, error) {
		<-release
		return exitResponse(id, "ok\n"), nil
	}}
	start(t, rel, Config{MaxInFlight: 2}, mount)
	ids := []string{descriptor.NewID(), descriptor.NewID(), descriptor.NewID(), descriptor.NewID(), descriptor.NewID()}
	for _, id := range ids {
		put(t, mount, descriptor.RequestsDir, descriptor.FileName(id), requestBody(id))
	}
	waitFor(t, "two relays in flight", func() bool { return len(rel.relayed()) == 2 })
	td := descriptor.NewID()
	put(t, mount, descriptor.TeardownsDir, descriptor.FileName(td), []byte("{}"))
	waitFor(t, "the teardown", func() bool { return len(rel.tornDown()) == 1 })
	if n := len(rel.relayed()); n != 2 {
		t.Fatalf("%d relays started with MaxInFlight 2", n)
	}
	close(release)
	for _, id := range ids {
		wantOK(t, response(t, mount, id))
	}
	rel.mu.Lock()
	peak := rel.peak
	rel.mu.Unlock()
	if peak > 2 {
		t.Fatalf("%d relays at once, want at most 2", peak)
	}
}

func TestUnsafeMountRefused(t *testing.T) {
	for _, tt := range []struct {
		name  string
		setup func(t *testing.T, mount string)
	}{
		{"requests is a symlink", func(t *testing.T, mount string) {
			req := filepath.Join(mount, descriptor.DirName, descriptor.RequestsDir)
			if err := os.Remove(req); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(t.TempDir(), req); err != nil {
				t.Fatal(err)
			}
		}},
		{"responses is a symlink", func(t *testing.T, mount string) {
			resp := filepath.Join(mount, descriptor.DirName, descriptor.ResponsesDir)
			if err := os.Remove(resp); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(t.TempDir(), resp); err != nil {
				t.Fatal(err)
			}
		}},
		{".coily is a symlink", func(t *testing.T, mount string) {
			other := newMount(t)
			c := filepath.Join(mount, descriptor.DirName)
			if err := os.RemoveAll(c); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(filepath.Join(other, descriptor.DirName), c); err != nil {
				t.Fatal(err)
			}
		}},
		{"teardowns is a file", func(t *testing.T, mount string) {
			td := filepath.Join(mount, descriptor.DirName, descriptor.TeardownsDir)
			if err := os.Remove(td); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(td, nil, 0o600); err != nil {
				t.Fatal(err)
			}
		}},
		{"tmp is a dangling symlink", func(t *testing.T, mount string) {
			tmp := filepath.Join(mount, descriptor.DirName, descriptor.TmpDir)
			if err := os.Remove(tmp); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(filepath.Join(t.TempDir(), "nowhere"), tmp); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			good, bad := newMount(t), newMount(t)
			tt.setup(t, bad)
			rel := &fakeRelayer{}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			err := Run(ctx, Config{Relayer: rel, Logger: slog.New(slog.DiscardHandler),
				Mounts: []Mount{{Dir: good, Sandbox: "good"}, {Dir: bad, Sandbox: "demo"}}})
			if err == nil || !strings.Contains(err.Error(), bad) || ctx.Err() != nil {
				t.Fatalf("Run: %v; want an immediate error naming %s", err, bad)
			}
			t.Log(err)
		})
	}
	t.Run("same folder twice", func(t *testing.T) {
		m := newMount(t)
		err := Run(context.Background(), Config{Relayer: &fakeRelayer{}, Mounts: []Mount{{m, "a"}, {m + "/.", "b"}}})
		if err == nil || !strings.Contains(err.Error(), "same folder") {
			t.Fatalf("Run: %v", err)
		}
	})
}

func TestRescanWithoutEvents(t *testing.T) {
	saved := startWatch
	startWatch = func(*slog.Logger, []*dir, func()) func() { return func() {} }
	t.Cleanup(func() { startWatch = saved })
	mount := newMount(t)
	early := descriptor.NewID()
	put(t, mount, descriptor.RequestsDir, descriptor.FileName(early), requestBody(early))
	rel := &fakeRelayer{}
	start(t, rel, Config{Rescan: 100 * time.Millisecond}, mount)
	wantOK(t, response(t, mount, early))
	late := descriptor.NewID()
	put(t, mount, descriptor.RequestsDir, descriptor.FileName(late), requestBody(late))
	wantOK(t, response(t, mount, late))
}

// TestEventsWakeTheBridge: with no rescan to speak of, file-system events
// alone get a request answered.
func TestEventsWakeTheBridge(t *testing.T) {
	mount := newMount(t)
	rel := &fakeRelayer{}
	start(t, rel, Config{Rescan: time.Hour}, mount)
	for range 3 {
		id := descriptor.NewID()
		put(t, mount, descriptor.RequestsDir, descriptor.FileName(id), requestBody(id))
		wantOK(t, response(t, mount, id))
	}
}

func TestStaleTempsRemoved(t *testing.T) {
	mount := newMount(t)
	old := path(mount, descriptor.ResponsesDir, tempPrefix+"old")
	fresh := path(mount, descriptor.ResponsesDir, tempPrefix+"fresh")
	answer := path(mount, descriptor.ResponsesDir, descriptor.FileName(descriptor.NewID()))
	for _, p := range []string{old, fresh, answer} {
		if err := os.WriteFile(p, nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	then := time.Now().Add(-2 * time.Minute)
	if err := os.Chtimes(old, then, then); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(answer, then, then); err != nil {
		t.Fatal(err)
	}
	start(t, &fakeRelayer{}, Config{}, mount)
	waitFor(t, "the stale temporary file to go", func() bool { return !exists(old) })
	if !exists(fresh) || !exists(answer) {
		t.Fatal("a fresh temporary file or an old response was removed")
	}
}

func TestDirectoryRequestRefused(t *testing.T) {
	mount := newMount(t)
	id := descriptor.NewID()
	d := path(mount, descriptor.RequestsDir, descriptor.FileName(id))
	if err := os.Mkdir(d, 0o700); err != nil {
		t.Fatal(err)
	}
	// One that is not empty cannot be removed: answered once, then left.
	full := descriptor.NewID()
	fullDir := path(mount, descriptor.RequestsDir, descriptor.FileName(full))
	if err := os.MkdirAll(filepath.Join(fullDir, "inside"), 0o700); err != nil {
		t.Fatal(err)
	}
	rel := &fakeRelayer{}
	r := start(t, rel, Config{Rescan: 20 * time.Millisecond}, mount)
	wantRefused(t, response(t, mount, id), descriptor.CodeBadRequest)
	waitFor(t, "the empty directory to be removed", func() bool { return !exists(d) })
	fullResp := path(mount, descriptor.ResponsesDir, descriptor.FileName(full))
	wantRefused(t, response(t, mount, full), descriptor.CodeBadRequest)
	if err := os.Remove(fullResp); err != nil {
		t.Fatal(err)
	}
	// Several scans later (each answer starts one), it has not been
	// answered again.
	waitFor(t, "the failed deletion", func() bool { return strings.Count(r.log.String(), "cannot delete") >= 1 })
	for range 5 {
		other := descriptor.NewID()
		put(t, mount, descriptor.RequestsDir, descriptor.FileName(other), requestBody(other))
		wantOK(t, response(t, mount, other))
		os.Remove(path(mount, descriptor.ResponsesDir, descriptor.FileName(other)))
	}
	if exists(fullResp) || strings.Count(r.log.String(), "cannot delete") != 1 {
		t.Fatalf("a directory that cannot be removed was answered again")
	}
	if calls := rel.relayed(); len(calls) != 5 {
		t.Fatalf("relayed %d, want only the 5 regular requests", len(calls))
	}
}

func TestStopsWithRelaysInFlight(t *testing.T) {
	mount := newMount(t)
	rel := &fakeRelayer{}
	rel.relay = func(id string, n int) ([]byte, error) {
		time.Sleep(50 * time.Millisecond) // a relay the context does not reach
		return nil, context.Canceled
	}
	r := start(t, rel, Config{}, mount)
	id := descriptor.NewID()
	put(t, mount, descriptor.RequestsDir, descriptor.FileName(id), requestBody(id))
	waitFor(t, "a relay", func() bool { return len(rel.relayed()) > 0 })
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	if !exists(path(mount, descriptor.RequestsDir, descriptor.FileName(id))) {
		t.Fatal("a request not answered was deleted")
	}
}

// TestManyAtOnce: a burst of requests mixed with junk is answered in full,
// never more than MaxInFlight at a time.
func TestManyAtOnce(t *testing.T) {
	mount := newMount(t)
	rel := &fakeRelayer{}
	start(t, rel, Config{MaxInFlight: 3}, mount)
	var ids []string
	for i := range 200 {
		id := descriptor.NewID()
		ids = append(ids, id)
		put(t, mount, descriptor.RequestsDir, descriptor.FileName(id), requestBody(id))
		if err := os.WriteFile(path(mount, descriptor.RequestsDir, fmt.Sprintf("junk-%d", i)), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range ids {
		wantOK(t, response(t, mount, id))
	}
	waitFor(t, "requests/ to be empty", func() bool {
		entries, _ := os.ReadDir(path(mount, descriptor.RequestsDir, ""))
		return len(entries) == 0
	})
	rel.mu.Lock()
	defer rel.mu.Unlock()
	if len(rel.relays) != len(ids) || rel.peak > 3 {
		t.Fatalf("%d relays (want %d), %d at once (want at most 3)", len(rel.relays), len(ids), rel.peak)
	}
}

// A second request under an id another request holds never replaces the
// first's answer: not the server's refusal of it while the first runs
// (held) or once it is answered (replay-detected, while the first's answer
// waits for its client), nor the bridge's own refusal of a file it cannot
// read.
func TestAnswerNeverReplacedBySecondRequest(t *testing.T) {
	mount := newMount(t)
	rel := &fakeRelayer{relay: func(id string, n int) ([]byte, error) {
		switch n {
		case 0:
			return exitResponse(id, "ok\n"), nil
		case 1: // as the server answers a second body once the first is answered: a refused response file
			return refusedResponse(id, "replay-detected", "request id already used for a different request", "A000000000009")
		}
		return nil, &Refusal{Code: "replay-detected", Message: "request id already used for a different request", Held: true}
	}}
	start(t, rel, Config{}, mount)
	id := descriptor.NewID()
	put(t, mount, descriptor.RequestsDir, descriptor.FileName(id), requestBody(id))
	wantOK(t, response(t, mount, id))

	for _, name := range []string{id + ".yaml", descriptor.FileName(id)} { // answered, then held
		p := path(mount, descriptor.RequestsDir, name)
		put(t, mount, descriptor.RequestsDir, name, []byte("id: "+id+"\nargv: [/bin/false]\n"))
		waitFor(t, "the second request to be deleted", func() bool { return !exists(p) })
	}
	fifo := path(mount, descriptor.RequestsDir, descriptor.FileName(id))
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the FIFO to be deleted", func() bool { return !exists(fifo) })
	wantOK(t, response(t, mount, id))
	if n := len(rel.relayed()); n != 3 {
		t.Errorf("relayed %d times, want 3 (the FIFO is never relayed)", n)
	}
	// Held: never written, even where no answer waits.
	if err := os.Remove(path(mount, descriptor.ResponsesDir, descriptor.FileName(id))); err != nil {
		t.Fatal(err)
	}
	p := path(mount, descriptor.RequestsDir, descriptor.FileName(id))
	put(t, mount, descriptor.RequestsDir, descriptor.FileName(id), []byte("id: "+id+"\nargv: [/bin/true]\n"))
	waitFor(t, "the held request to be deleted", func() bool { return !exists(p) })
	if exists(path(mount, descriptor.ResponsesDir, descriptor.FileName(id))) {
		t.Errorf("a held refusal was written")
	}
}
