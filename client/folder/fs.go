package folder

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"
	"google.golang.org/protobuf/types/known/durationpb"

	"coily.dev/coily/client"
	"coily.dev/coily/descriptor"
	coilyv1 "coily.dev/coily/proto/coily/v1"
	"coily.dev/coily/refusal"
)

// The filesystem transport's timing. The rate-limit retry mirrors the
// gRPC client's defaults (client.RateLimitRetries, client.MaxRetryDelay),
// with the same loop (client.RetryRateLimited): at most fsRateLimitRetries retries,
// none waiting longer than fsMaxRetryDelay. A response carries no
// retry-after, so the wait starts at Client.RetryDelay and doubles.
const (
	// DefaultPoll is Client's polling backstop when Poll is zero.
	DefaultPoll = 200 * time.Millisecond
	// ResponseMargin is how long past a request's own timeout the client
	// waits for its response before tearing it down.
	ResponseMargin = 30 * time.Second

	fsRateLimitRetries = 3
	fsRetryDelay       = time.Second
	fsMaxRetryDelay    = 30 * time.Second
	// fsParseGrace is how long a response that does not parse may stay so
	// before the client gives up on it. The bridge renames responses into
	// place, so one that does not parse is broken, not half-written; the
	// grace covers a bridge that writes in place all the same.
	fsParseGrace = 2 * time.Second
)

// Client runs commands through a shared folder (the filesystem
// transport of a network-less sandbox): it writes a signed request into
// Mount/.coily/requests, and coily's bridge, on the other side of the
// folder, relays it to the server and writes the response into
// Mount/.coily/responses.
type Client struct {
	Mount string // the shared folder, holding .coily/
	Key   KeyFile
	Now   func() time.Time // nil: time.Now
	Poll  time.Duration    // polling backstop to file events; 0: DefaultPoll
	// RetryDelay is the wait before the first retry of a rate-limit
	// refusal; it doubles with each retry, up to 30s. 0: one second.
	RetryDelay time.Duration

	// requestWritten, when set (by tests), is called once a request is in
	// requests/, before the client starts waiting for its response.
	requestWritten func(id string)
}

// Exec runs a command as Client.Exec does: it returns the exit status,
// with the command's output written to stdout and stderr, or a
// *refusal.Error. Output arrives all at once, with the response. A
// rate-limit refusal is retried (as a new request) up to three times.
//
// Without a response, it waits until ctx ends or, when req has a timeout,
// until that timeout (rounded up to whole seconds) plus ResponseMargin has
// passed; then it writes a teardown of the request and returns ctx's
// error, or one wrapping context.DeadlineExceeded. Without a timeout in
// req only the server knows the rule's, so only ctx bounds the wait. (The
// timeout does not count a wait for a human's approval, which this
// transport cannot see: give such commands a ctx rather than a timeout.)
func (c *Client) Exec(ctx context.Context, req *coilyv1.ExecRequest, stdout, stderr io.Writer) (*coilyv1.ExecExit, error) {
	first := c.RetryDelay
	if first <= 0 {
		first = fsRetryDelay
	}
	// A response carries no retry-after: the backoff alone paces retries.
	return client.RetryRateLimited(ctx, fsRateLimitRetries, first, fsMaxRetryDelay, func() (*coilyv1.ExecExit, error) {
		return c.execOnce(ctx, req, stdout, stderr)
	})
}

func (c *Client) now() time.Time {
	if c.Now != nil {
		return c.Now().UTC()
	}
	return time.Now().UTC()
}

func (c *Client) poll() time.Duration {
	if c.Poll > 0 {
		return c.Poll
	}
	return DefaultPoll
}

// execOnce sends one request and waits for its response.
func (c *Client) execOnce(ctx context.Context, req *coilyv1.ExecRequest, stdout, stderr io.Writer) (*coilyv1.ExecExit, error) {
	d, wait := c.build(req)
	resp, err := c.send(ctx, d, wait)
	if err != nil {
		return nil, err
	}
	return deliver(resp, stdout, stderr)
}

// send writes the request d, signed, and waits for its response: until
// ctx ends or, when wait is not 0, until wait has passed; then it tears
// the request down.
func (c *Client) send(ctx context.Context, d *descriptor.Request, wait time.Duration) (*descriptor.Response, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	data, err := descriptor.MarshalRequest(d, c.Key.Key)
	if err != nil {
		return nil, marshalError(err)
	}
	for _, dir := range []string{descriptor.TmpDir, descriptor.ResponsesDir, descriptor.TeardownsDir} {
		if err := os.MkdirAll(descriptor.Path(c.Mount, dir, ""), 0o700); err != nil {
			return nil, fmt.Errorf("client: shared folder: %w", err)
		}
	}
	name := descriptor.FileName(d.ID)
	if err := c.place(descriptor.RequestsDir, name, name, data); err != nil {
		return nil, fmt.Errorf("client: write request: %w", err)
	}
	if c.requestWritten != nil {
		c.requestWritten(d.ID)
	}
	w := c.waiter(d.ID)
	defer w.close()
	var deadline <-chan time.Time
	if wait > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		deadline = t.C
	}
	ticker := time.NewTicker(c.poll())
	defer ticker.Stop()
	for {
		// Checked after the watch is armed: a response that landed before
		// it sends no event.
		if resp, err := w.check(); resp != nil || err != nil {
			return resp, err
		}
		select {
		case <-ctx.Done():
			return nil, c.abandon(d.ID, ctx.Err())
		case <-deadline:
			return nil, c.abandon(d.ID, fmt.Errorf("client: no response from coily's bridge within %s: %w", wait, context.DeadlineExceeded))
		case <-w.events:
		case <-ticker.C:
		}
	}
}

// build makes the request descriptor for req, and how long to wait for
// its response (0: until ctx ends).
func (c *Client) build(req *coilyv1.ExecRequest) (*descriptor.Request, time.Duration) {
	d := &descriptor.Request{
		ID:        descriptor.NewID(),
		CreatedAt: c.now(),
		Nonce:     newNonce(),
		Sandbox:   c.Key.Sandbox,
		Argv:      req.GetArgv(),
		Cwd:       req.GetCwd(),
		Note:      req.GetNote(),
	}
	if len(req.GetEnv()) > 0 {
		d.Env = req.GetEnv()
	}
	if len(req.GetStdin()) > 0 {
		d.Stdin = req.GetStdin()
	}
	var wait time.Duration
	if t := req.GetTimeout().AsDuration(); req.GetTimeout() != nil && t > 0 {
		// Whole seconds, rounded up; the server clamps to the rule's
		// timeout anyway, so clamp to what a descriptor may say.
		t = min(t, descriptor.MaxTimeout*time.Second)
		d.Timeout = (t + time.Second - 1) / time.Second * time.Second
		wait = d.Timeout + ResponseMargin
	}
	return d, wait
}

// marshalError turns a request that cannot be written into the refusal
// the server would have sent for it.
func marshalError(err error) error {
	var de *descriptor.Error
	if errors.As(err, &de) {
		return &refusal.Error{Code: refusal.Code(de.Code), Msg: de.Error()}
	}
	return fmt.Errorf("client: sign request: %w", err)
}

// place writes data to tmp/tmpName (new, 0600), syncs it and renames it to
// dir/name, so the bridge never sees part of a file.
func (c *Client) place(dir, name, tmpName string, data []byte) error {
	tmp := descriptor.Path(c.Mount, descriptor.TmpDir, tmpName)
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, descriptor.Path(c.Mount, dir, name))
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}

// abandon tears request id down and returns why it was abandoned (with
// the teardown's failure, if it failed).
func (c *Client) abandon(id string, why error) error {
	if err := c.teardown(id); err != nil {
		return errors.Join(why, err)
	}
	return why
}

// teardown asks the bridge to cancel request id.
func (c *Client) teardown(id string) error {
	data, err := descriptor.MarshalTeardown(&descriptor.Teardown{ID: id, CreatedAt: c.now(), Nonce: newNonce(),
		Sandbox: c.Key.Sandbox}, c.Key.Key)
	if err == nil {
		err = c.place(descriptor.TeardownsDir, descriptor.FileName(id), id+".teardown.json", data)
	}
	if err != nil {
		return fmt.Errorf("client: write teardown: %w", err)
	}
	return nil
}

// waiter watches for one response file.
type waiter struct {
	path     string
	name     string
	watcher  *fsnotify.Watcher // nil: polling only
	events   chan struct{}     // a file event for the response
	done     chan struct{}
	firstBad time.Time // when the file was first seen not to parse
}

// waiter arms a watch on responses/ for request id. Without one (no
// inotify/kqueue, or a folder that does not report changes) polling finds
// the response alone.
func (c *Client) waiter(id string) *waiter {
	w := &waiter{path: descriptor.Path(c.Mount, descriptor.ResponsesDir, descriptor.FileName(id)),
		name: descriptor.FileName(id), events: make(chan struct{}, 1), done: make(chan struct{})}
	fw, err := fsnotify.NewWatcher()
	if err != nil {
		return w
	}
	if err := fw.Add(filepath.Dir(w.path)); err != nil {
		fw.Close()
		return w
	}
	w.watcher = fw
	go w.forward()
	return w
}

// forward turns the watcher's events for the response into wake-ups;
// watcher errors are left to polling.
func (w *waiter) forward() {
	for {
		select {
		case ev, ok := <-w.watcher.Events:
			if !ok {
				return
			}
			if filepath.Base(ev.Name) != w.name {
				continue
			}
			select {
			case w.events <- struct{}{}:
			default:
			}
		case _, ok := <-w.watcher.Errors:
			if !ok {
				return
			}
		case <-w.done:
			return
		}
	}
}

func (w *waiter) close() {
	close(w.done)
	if w.watcher != nil {
		// fsnotify's Close waits for its reader to notice (≈10 ms on
		// Linux): not on the caller's path.
		go w.watcher.Close()
	}
}

// check reads the response when it is there and complete; it then
// removes it. It returns nil, nil while there is none.
func (w *waiter) check() (*descriptor.Response, error) {
	f, err := os.Open(w.path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("client: read response: %w", err)
	}
	data, err := io.ReadAll(io.LimitReader(f, descriptor.MaxResponseSize+1))
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("client: read response: %w", err)
	}
	resp, err := descriptor.ParseResponse(data)
	if err != nil {
		now := time.Now()
		if w.firstBad.IsZero() {
			w.firstBad = now
		}
		if now.Sub(w.firstBad) < fsParseGrace {
			return nil, nil
		}
		// Left in place for whoever looks into it.
		return nil, refusal.New(refusal.Internal, "unreadable response from coily's bridge (%s): %v", w.path, err)
	}
	if err := os.Remove(w.path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("client: remove response: %w", err)
	}
	if want := w.name[:len(w.name)-len(".json")]; resp.ID != want {
		return nil, refusal.New(refusal.Internal, "coily's bridge answered request %s with the response of %s", want, resp.ID)
	}
	return resp, nil
}

// deliver turns a response into Exec's results.
func deliver(resp *descriptor.Response, stdout, stderr io.Writer) (*coilyv1.ExecExit, error) {
	switch resp.Outcome {
	case descriptor.OutcomeRefused:
		return nil, &refusal.Error{Code: refusal.Code(resp.Code), Msg: resp.Message, AuditID: resp.AuditID}
	case descriptor.OutcomeExit:
	default:
		return nil, refusal.New(refusal.Internal, "coily's bridge answered a command with a %q response", resp.Outcome)
	}
	out, err := resp.Stdout()
	if err != nil {
		return nil, refusal.New(refusal.Internal, "response from coily's bridge: stdout: %v", err)
	}
	errOut, err := resp.Stderr()
	if err != nil {
		return nil, refusal.New(refusal.Internal, "response from coily's bridge: stderr: %v", err)
	}
	if _, err := stdout.Write(out); err != nil {
		return nil, fmt.Errorf("client: write output: %w", err)
	}
	if _, err := stderr.Write(errOut); err != nil {
		return nil, fmt.Errorf("client: write output: %w", err)
	}
	return &coilyv1.ExecExit{
		ExitCode:        int32(resp.ExitCode),
		Signal:          int32(resp.Signal),
		Duration:        durationpb.New(time.Duration(resp.DurationMS) * time.Millisecond),
		StdoutTruncated: resp.StdoutTruncated,
		StderrTruncated: resp.StderrTruncated,
		AuditId:         resp.AuditID,
	}, nil
}

// newNonce returns 32 random hex digits.
func newNonce() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
