package folder

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"
	"google.golang.org/protobuf/types/known/durationpb"

	"coily.dev/coily/client"
	"coily.dev/coily/descriptor"
	coilyv1 "coily.dev/coily/proto/coily/v1"
	"coily.dev/coily/refusal"
)

// fakeBridge answers requests in a mount the way coily's bridge does: it
// takes each file out of requests/, parses and verifies it, and writes the
// answer its answer func gives (none when nil) to responses/ by rename.
type fakeBridge struct {
	t      *testing.T
	mount  string
	key    KeyFile
	answer func(n int, r *descriptor.Request) *descriptor.Response

	mu   sync.Mutex
	seen []*descriptor.Request
	got  chan *descriptor.Request // every request handled, in order
}

func newMount(t *testing.T) string {
	t.Helper()
	mount := t.TempDir()
	for _, d := range descriptor.Dirs {
		if err := os.MkdirAll(descriptor.Path(mount, d, ""), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	return mount
}

func newFakeBridge(t *testing.T, answer func(n int, r *descriptor.Request) *descriptor.Response) *fakeBridge {
	return &fakeBridge{t: t, mount: newMount(t), key: KeyFile{Sandbox: "demo", Key: testKey, Generation: 1},
		answer: answer, got: make(chan *descriptor.Request, 100)}
}

// start runs the bridge until the test ends, polling requests/.
func (b *fakeBridge) start() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	b.t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		for {
			b.sweep()
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
}

func (b *fakeBridge) sweep() {
	entries, err := os.ReadDir(descriptor.Path(b.mount, descriptor.RequestsDir, ""))
	if err != nil {
		b.t.Errorf("bridge: %v", err)
		return
	}
	for _, e := range entries {
		b.handle(e.Name())
	}
}

// handle answers requests/<name>.
func (b *fakeBridge) handle(name string) {
	path := descriptor.Path(b.mount, descriptor.RequestsDir, name)
	data, err := os.ReadFile(path)
	if err != nil {
		b.t.Errorf("bridge: %v", err)
		return
	}
	os.Remove(path)
	id, ok := descriptor.IDFromName(name)
	if !ok {
		b.t.Errorf("bridge: request file name %q", name)
		return
	}
	r, canon, err := descriptor.ParseRequest(data)
	if err != nil {
		b.t.Errorf("bridge: parse %s: %v", name, err)
		return
	}
	if err := descriptor.Verify(canon, r.HMAC, b.key.Key); err != nil || r.ID != id || r.Sandbox != b.key.Sandbox {
		b.t.Errorf("bridge: %s: verify %v, id %s, sandbox %s", name, err, r.ID, r.Sandbox)
		return
	}
	b.mu.Lock()
	b.seen = append(b.seen, r)
	n := len(b.seen)
	b.mu.Unlock()
	b.got <- r
	resp := b.answer(n, r)
	if resp == nil {
		return
	}
	resp.ID = r.ID
	out, err := descriptor.MarshalResponse(resp)
	if err != nil {
		b.t.Errorf("bridge: %v", err)
		return
	}
	b.writeResponse(r.ID, out)
}

func (b *fakeBridge) writeResponse(id string, out []byte) {
	tmp := descriptor.Path(b.mount, descriptor.TmpDir, id+".bridge")
	if err := os.WriteFile(tmp, out, 0o600); err != nil {
		b.t.Errorf("bridge: %v", err)
		return
	}
	if err := os.Rename(tmp, descriptor.Path(b.mount, descriptor.ResponsesDir, descriptor.FileName(id))); err != nil {
		b.t.Errorf("bridge: %v", err)
	}
}

func (b *fakeBridge) client() *Client {
	return &Client{Mount: b.mount, Key: b.key, Poll: 5 * time.Millisecond, RetryDelay: time.Millisecond}
}

func exitWith(code int, stdout, stderr []byte) *descriptor.Response {
	r := &descriptor.Response{Outcome: descriptor.OutcomeExit, ExitCode: code, DurationMS: 1500, AuditID: "audit-1"}
	r.SetOutput(stdout, stderr)
	return r
}

func refusedWith(code refusal.Code, msg string) *descriptor.Response {
	return &descriptor.Response{Outcome: descriptor.OutcomeRefused, Code: string(code), Message: msg}
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

var uuidV4RE = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

func TestFSClientExit(t *testing.T) {
	binary := []byte{0xff, 0x00, 'o', 'u', 't', 0xfe}
	b := newFakeBridge(t, func(int, *descriptor.Request) *descriptor.Response {
		r := exitWith(3, binary, []byte("warning\n"))
		r.StdoutTruncated = true
		return r
	})
	b.start()
	var stdout, stderr bytes.Buffer
	req := &coilyv1.ExecRequest{Argv: []string{"/bin/echo", "hi"}, Env: map[string]string{"A": "1"}, Cwd: "sub",
		Stdin: []byte{0, 1, 2}, Note: "why", Timeout: durationpb.New(1200 * time.Millisecond)}
	before := time.Now().UTC().Add(-time.Second)
	exit, err := b.client().Exec(testCtx(t), req, &stdout, &stderr)
	if err != nil {
		t.Fatal(err)
	}
	if exit.GetExitCode() != 3 || exit.GetSignal() != 0 || exit.GetDuration().AsDuration() != 1500*time.Millisecond ||
		!exit.GetStdoutTruncated() || exit.GetStderrTruncated() || exit.GetAuditId() != "audit-1" {
		t.Fatalf("exit %v", exit)
	}
	if !bytes.Equal(stdout.Bytes(), binary) || stderr.String() != "warning\n" {
		t.Fatalf("stdout %q stderr %q", stdout.Bytes(), stderr.String())
	}
	r := <-b.got
	if !uuidV4RE.MatchString(r.ID) || !regexp.MustCompile(`^[0-9a-f]{32}$`).MatchString(r.Nonce) ||
		r.CreatedAt.Before(before) || r.CreatedAt.After(time.Now().Add(time.Second)) || !strings.HasSuffix(r.CreatedAtRaw, "Z") {
		t.Fatalf("header id %q nonce %q created %q", r.ID, r.Nonce, r.CreatedAtRaw)
	}
	if strings.Join(r.Argv, " ") != "/bin/echo hi" || r.Env["A"] != "1" || r.Cwd != "sub" ||
		!bytes.Equal(r.Stdin, []byte{0, 1, 2}) || r.Note != "why" || r.Timeout != 2*time.Second {
		t.Fatalf("request %+v", r)
	}
	// The response was consumed and nothing was left in tmp/.
	for _, dir := range []string{descriptor.ResponsesDir, descriptor.TmpDir} {
		if entries, _ := os.ReadDir(descriptor.Path(b.mount, dir, "")); len(entries) != 0 {
			t.Fatalf("%s holds %d files after the exec", dir, len(entries))
		}
	}
}

func TestFSClientSignal(t *testing.T) {
	b := newFakeBridge(t, func(int, *descriptor.Request) *descriptor.Response {
		r := exitWith(-1, nil, nil)
		r.Signal = 9
		return r
	})
	b.start()
	exit, err := b.client().Exec(testCtx(t), &coilyv1.ExecRequest{Argv: []string{"/bin/sh"}}, &bytes.Buffer{}, &bytes.Buffer{})
	if err != nil || client.ExitCode(exit) != 137 {
		t.Fatalf("exit %v err %v", exit, err)
	}
	if r := <-b.got; r.Timeout != 0 || r.Stdin != nil || r.Env != nil {
		t.Fatalf("unset fields written: %+v", r)
	}
}

func TestFSClientRefused(t *testing.T) {
	b := newFakeBridge(t, func(int, *descriptor.Request) *descriptor.Response {
		return refusedWith(refusal.PolicyDeny, "no rule allows /usr/bin/id")
	})
	b.start()
	var stdout bytes.Buffer
	exit, err := b.client().Exec(testCtx(t), &coilyv1.ExecRequest{Argv: []string{"/usr/bin/id"}}, &stdout, &stdout)
	var r *refusal.Error
	if exit != nil || !errors.As(err, &r) || r.Code != refusal.PolicyDeny || r.Msg != "no rule allows /usr/bin/id" || stdout.Len() != 0 {
		t.Fatalf("exit %v err %v", exit, err)
	}
}

func TestFSClientRateLimitRetried(t *testing.T) {
	b := newFakeBridge(t, func(n int, _ *descriptor.Request) *descriptor.Response {
		if n == 1 {
			return refusedWith(refusal.RateLimit, "slow down")
		}
		return exitWith(0, []byte("ok\n"), nil)
	})
	b.start()
	var stdout bytes.Buffer
	exit, err := b.client().Exec(testCtx(t), &coilyv1.ExecRequest{Argv: []string{"/bin/true"}}, &stdout, &bytes.Buffer{})
	if err != nil || exit.GetExitCode() != 0 || stdout.String() != "ok\n" {
		t.Fatalf("exit %v err %v stdout %q", exit, err, stdout.String())
	}
	first, second := <-b.got, <-b.got
	if first.ID == second.ID || first.Nonce == second.Nonce {
		t.Fatalf("retry reused id %s or nonce", first.ID)
	}
}

func TestFSClientRateLimitGivesUp(t *testing.T) {
	b := newFakeBridge(t, func(int, *descriptor.Request) *descriptor.Response {
		return refusedWith(refusal.RateLimit, "slow down")
	})
	b.start()
	_, err := b.client().Exec(testCtx(t), &coilyv1.ExecRequest{Argv: []string{"/bin/true"}}, &bytes.Buffer{}, &bytes.Buffer{})
	var r *refusal.Error
	if !errors.As(err, &r) || r.Code != refusal.RateLimit {
		t.Fatalf("err %v", err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.seen) != 1+fsRateLimitRetries {
		t.Fatalf("%d requests, want %d", len(b.seen), 1+fsRateLimitRetries)
	}
}

func TestFSClientCancelWritesTeardown(t *testing.T) {
	b := newFakeBridge(t, func(int, *descriptor.Request) *descriptor.Response { return nil })
	b.start()
	ctx, cancel := context.WithCancel(testCtx(t))
	errc := make(chan error, 1)
	go func() {
		_, err := b.client().Exec(ctx, &coilyv1.ExecRequest{Argv: []string{"/bin/sleep", "60"}}, &bytes.Buffer{}, &bytes.Buffer{})
		errc <- err
	}()
	var r *descriptor.Request
	select {
	case r = <-b.got:
	case <-time.After(20 * time.Second):
		t.Fatal("the request never reached the bridge")
	}
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v, want context.Canceled", err)
	}
	// Exec returns once the teardown is in place.
	data, err := os.ReadFile(descriptor.Path(b.mount, descriptor.TeardownsDir, descriptor.FileName(r.ID)))
	if err != nil {
		t.Fatal(err)
	}
	td, canon, err := descriptor.ParseTeardown(data)
	if err != nil {
		t.Fatal(err)
	}
	if err := descriptor.Verify(canon, td.HMAC, testKey); err != nil || td.ID != r.ID || td.Sandbox != "demo" || td.Nonce == r.Nonce {
		t.Fatalf("teardown %+v: %v", td, err)
	}
	if entries, _ := os.ReadDir(descriptor.Path(b.mount, descriptor.TmpDir, "")); len(entries) != 0 {
		t.Fatalf("tmp holds %d files", len(entries))
	}
}

// A response already there when the client starts waiting sends no file
// event; the client must still find it, without waiting for a poll.
func TestFSClientResponseBeforeWatch(t *testing.T) {
	b := newFakeBridge(t, func(int, *descriptor.Request) *descriptor.Response {
		return exitWith(0, []byte("early\n"), nil)
	})
	c := b.client()
	c.Poll = time.Hour // only the check after arming the watch can find it in time
	c.requestWritten = func(id string) { b.handle(descriptor.FileName(id)) }
	var stdout bytes.Buffer
	exit, err := c.Exec(testCtx(t), &coilyv1.ExecRequest{Argv: []string{"/bin/echo"}}, &stdout, &bytes.Buffer{})
	if err != nil || exit.GetExitCode() != 0 || stdout.String() != "early\n" {
		t.Fatalf("exit %v err %v stdout %q", exit, err, stdout.String())
	}
}

// With polling out of the picture, the file event alone wakes the client.
func TestFSClientWatchWakes(t *testing.T) {
	if w, err := fsnotify.NewWatcher(); err != nil {
		t.Skipf("no file events here: %v", err)
	} else {
		w.Close()
	}
	b := newFakeBridge(t, func(int, *descriptor.Request) *descriptor.Response {
		return exitWith(0, []byte("woken\n"), nil)
	})
	c := b.client()
	c.Poll = time.Hour
	// Answer from another goroutine once the client is waiting.
	c.requestWritten = func(id string) { go b.handle(descriptor.FileName(id)) }
	var stdout bytes.Buffer
	exit, err := c.Exec(testCtx(t), &coilyv1.ExecRequest{Argv: []string{"/bin/echo"}}, &stdout, &bytes.Buffer{})
	if err != nil || exit.GetExitCode() != 0 || stdout.String() != "woken\n" {
		t.Fatalf("exit %v err %v stdout %q", exit, err, stdout.String())
	}
}

func TestFSClientUnreadableResponse(t *testing.T) {
	b := newFakeBridge(t, func(int, *descriptor.Request) *descriptor.Response { return nil })
	c := b.client()
	c.requestWritten = func(id string) {
		b.handle(descriptor.FileName(id))
		b.writeResponse(id, []byte(`{"version":1,"id":"`+id+`","outcome":"maybe"}`))
	}
	_, err := c.Exec(testCtx(t), &coilyv1.ExecRequest{Argv: []string{"/bin/echo"}}, &bytes.Buffer{}, &bytes.Buffer{})
	var r *refusal.Error
	if !errors.As(err, &r) || r.Code != refusal.Internal || !strings.Contains(r.Msg, "unreadable response") {
		t.Fatalf("err %v", err)
	}
}

func TestFSClientResponseForAnotherID(t *testing.T) {
	b := newFakeBridge(t, func(int, *descriptor.Request) *descriptor.Response { return nil })
	c := b.client()
	c.requestWritten = func(id string) {
		b.handle(descriptor.FileName(id))
		out, _ := descriptor.MarshalResponse(&descriptor.Response{ID: "00000000-0000-4000-8000-000000000000",
			Outcome: descriptor.OutcomeExit})
		b.writeResponse(id, out)
	}
	_, err := c.Exec(testCtx(t), &coilyv1.ExecRequest{Argv: []string{"/bin/echo"}}, &bytes.Buffer{}, &bytes.Buffer{})
	var r *refusal.Error
	if !errors.As(err, &r) || r.Code != refusal.Internal {
		t.Fatalf("err %v", err)
	}
}

func TestFSClientBadRequestNotWritten(t *testing.T) {
	b := newFakeBridge(t, func(int, *descriptor.Request) *descriptor.Response { return nil })
	for _, req := range []*coilyv1.ExecRequest{
		{},
		{Argv: []string{"/bin/echo"}, Env: map[string]string{"BAD-NAME": "x"}},
		{Argv: []string{"/bin/echo"}, Stdin: make([]byte, descriptor.MaxStdin+1)},
	} {
		_, err := b.client().Exec(testCtx(t), req, &bytes.Buffer{}, &bytes.Buffer{})
		var r *refusal.Error
		if !errors.As(err, &r) || r.Code != refusal.BadRequest {
			t.Fatalf("%v: err %v", req.GetArgv(), err)
		}
	}
	if entries, _ := os.ReadDir(descriptor.Path(b.mount, descriptor.RequestsDir, "")); len(entries) != 0 {
		t.Fatalf("%d requests written", len(entries))
	}
}

func TestFSClientTimeoutRounding(t *testing.T) {
	c := &Client{Key: KeyFile{Sandbox: "demo", Key: testKey, Generation: 1}}
	for _, tt := range []struct {
		in         *durationpb.Duration
		timeout    time.Duration
		waitForAll time.Duration
	}{
		{nil, 0, 0},
		{durationpb.New(0), 0, 0},
		{durationpb.New(-time.Second), 0, 0},
		{durationpb.New(time.Millisecond), time.Second, time.Second + ResponseMargin},
		{durationpb.New(5 * time.Second), 5 * time.Second, 5*time.Second + ResponseMargin},
		{durationpb.New(5*time.Second + 1), 6 * time.Second, 6*time.Second + ResponseMargin},
		{durationpb.New(1000 * time.Hour), descriptor.MaxTimeout * time.Second, descriptor.MaxTimeout*time.Second + ResponseMargin},
	} {
		d, wait := c.build(&coilyv1.ExecRequest{Argv: []string{"/x"}, Timeout: tt.in})
		if d.Timeout != tt.timeout || wait != tt.waitForAll {
			t.Errorf("timeout %v: descriptor %v, wait %v; want %v, %v", tt.in.AsDuration(), d.Timeout, wait, tt.timeout, tt.waitForAll)
		}
	}
}

func TestFSClientMissingLayoutCreated(t *testing.T) {
	// Only requests/ exists (what FindMount looks for): the client makes
	// the rest.
	mount := t.TempDir()
	if err := os.MkdirAll(filepath.Join(mount, ".coily", "requests"), 0o700); err != nil {
		t.Fatal(err)
	}
	b := &fakeBridge{t: t, mount: mount, key: KeyFile{Sandbox: "demo", Key: testKey, Generation: 1},
		answer: func(int, *descriptor.Request) *descriptor.Response { return exitWith(0, nil, nil) },
		got:    make(chan *descriptor.Request, 10)}
	b.start()
	if _, err := b.client().Exec(testCtx(t), &coilyv1.ExecRequest{Argv: []string{"/bin/true"}}, &bytes.Buffer{}, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
}

// A command answered with a git exchange's answer (a bridge or folder
// writer gone wrong) is refused, never read as an exit with status 0.
func TestDeliverRefusesHTTPAnswer(t *testing.T) {
	resp := &descriptor.Response{ID: descriptor.NewID(), Outcome: descriptor.OutcomeHTTP, Git: &descriptor.GitAnswer{Status: 200}}
	if exit, err := deliver(resp, new(bytes.Buffer), new(bytes.Buffer)); err == nil || exit != nil {
		t.Fatalf("an http answer to a command: %v %v", exit, err)
	}
}
