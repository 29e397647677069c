// Package policyfile keeps the server's policy in step with its file: a
// changed file is read once it is quiet and unchanged while read, parsed,
// audited before it takes effect, and refused (the last good policy kept
// in force, the refusal audited) when it cannot be read, is not a valid
// policy, or fails the tests beside it (package policycase).
package policyfile

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"

	"coily.dev/coily/access"
	"coily.dev/coily/audit"
	"coily.dev/coily/policy"
	"coily.dev/coily/policycase"
	"coily.dev/coily/refusal"
	"coily.dev/coily/regularfile"
)

// A changed policy file is read once it has been quiet: no event for
// reloadSettle (editors write in several steps), and unmodified for
// reloadQuiet by its mtime (a writer pausing mid-file, in place); it must
// not change while being read (size, mtime, and the SHA-256 of two reads).
// A writer pausing longer than reloadQuiet mid-file can still have a
// prefix read; if that prefix is a valid policy it would apply: write
// policies by rename (editors do; docs/policy.md says so).
const (
	reloadSettle = 250 * time.Millisecond
	reloadQuiet  = time.Second
)

// EventReload is the audit event of a policy reload, applied or
// refused.
const EventReload = "policy.reload"

// errPolicyChanging reports a policy file still being written.
var errPolicyChanging = errors.New("policy file is being written")

// Config is the server a Reloader keeps in step. Every field is required.
type Config struct {
	// Current returns the policy in force.
	Current func() *policy.Policy
	// Record writes an audit record, durably, and returns it as written.
	Record func(context.Context, audit.Record) (audit.Record, error)
	// Apply puts a policy in force, once its reload is recorded.
	Apply func(*policy.Policy)
	Log   *slog.Logger
}

// Reloader reloads one server's policy from its file.
type Reloader struct {
	cfg Config
}

// New returns a reloader under cfg.
func New(cfg Config) *Reloader { return &Reloader{cfg: cfg} }

// Reload loads the policy file at path and, if it is valid, passes the
// tests beside it (none beside it pass) and differs from the policy in
// force, puts it in force for new requests
// (requests already admitted keep the rule they were admitted under). An
// invalid file, or one failing its tests, changes nothing: the last good policy stays in force, and
// the refusal is logged and audited.
func (rl *Reloader) Reload(ctx context.Context, path string) error {
	data, err := readStable(path, 0, time.Now())
	if err != nil {
		return rl.refuseReload(ctx, path, nil, err, "")
	}
	return rl.applyPolicy(ctx, path, data)
}

// readStable reads the policy file, requiring it unmodified for quiet (by
// its mtime) and unchanged while read; errPolicyChanging otherwise.
func readStable(path string, quiet time.Duration, now time.Time) ([]byte, error) {
	before, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !before.Mode().IsRegular() {
		return nil, errors.New("policy file is not a regular file")
	}
	if before.Size() > policy.MaxFileSize {
		return nil, fmt.Errorf("policy file larger than %d bytes", policy.MaxFileSize)
	}
	if age := now.Sub(before.ModTime()); age < quiet {
		return nil, fmt.Errorf("%w (modified %s ago)", errPolicyChanging, age.Round(time.Millisecond))
	}
	data, err := readAtMost(path, policy.MaxFileSize)
	if err != nil {
		return nil, err
	}
	after, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if after.Size() != before.Size() || !after.ModTime().Equal(before.ModTime()) || int64(len(data)) != after.Size() {
		return nil, fmt.Errorf("%w (changed while read)", errPolicyChanging)
	}
	// Size and mtime miss a rewrite of the same length within the clock's
	// granularity: a second read must hash the same.
	again, err := readAtMost(path, policy.MaxFileSize)
	if err != nil {
		return nil, err
	}
	if sha256.Sum256(again) != sha256.Sum256(data) {
		return nil, fmt.Errorf("%w (changed while read)", errPolicyChanging)
	}
	return data, nil
}

// readAtMost reads the file at path, refusing one that holds more than max
// bytes by the time it is read (it may have grown since it was measured),
// and anything but a regular file, without blocking on a FIFO put in its
// place after it was measured.
func readAtMost(path string, max int64) ([]byte, error) {
	data, err := regularfile.Read(path, max)
	if errors.Is(err, regularfile.ErrTooLarge) {
		return nil, fmt.Errorf("policy file larger than %d bytes", max)
	}
	return data, err
}

// reloadRecord is the audit record of a reload of the file at path.
func (rl *Reloader) reloadRecord(path string) audit.Record {
	rec := access.CallerRecord(access.ServerCaller, "", EventReload, "")
	rec.Details = map[string]string{"path": path, "old_sha256": rl.cfg.Current().SHA256}
	return rec
}

// refuseReload audits a reload that cannot apply: the file could not be
// read (data nil), is not a valid policy (its SHA-256 recorded), or fails
// its tests (their file's SHA-256 recorded too). The last good policy
// stays in force; cause is returned.
func (rl *Reloader) refuseReload(ctx context.Context, path string, data []byte, cause error, testsSHA string) error {
	rec := rl.reloadRecord(path)
	rec.Decision, rec.Code, rec.Reason = "refuse", string(refusal.BadRequest), cause.Error()
	if data != nil {
		rec.Details["refused_sha256"] = fmt.Sprintf("%x", sha256.Sum256(data))
	}
	if testsSHA != "" {
		rec.Details["tests_sha256"] = testsSHA
	}
	if _, aerr := rl.cfg.Record(ctx, rec); aerr != nil {
		return fmt.Errorf("policy reload refused (%w), and the refusal could not be audited: %w", cause, aerr)
	}
	return cause
}

// applyPolicy parses a policy file's content and puts it in force, or
// audits the refusal.
func (rl *Reloader) applyPolicy(ctx context.Context, path string, data []byte) error {
	p, err := policy.ParseFile(path, data)
	if err != nil {
		return rl.refuseReload(ctx, path, data, err, "")
	}
	if p.SHA256 == rl.cfg.Current().SHA256 {
		return nil
	}
	testsSHA, err := RunTests(path, p)
	if err != nil {
		return rl.refuseReload(ctx, path, data, err, testsSHA)
	}
	rec := rl.reloadRecord(path)
	rec.Decision, rec.Details["new_sha256"] = "allow", p.SHA256
	if testsSHA != "" {
		rec.Details["tests_sha256"] = testsSHA
	}
	// Audited before it takes effect: a policy change that cannot be
	// recorded does not happen.
	if _, err := rl.cfg.Record(ctx, rec); err != nil {
		return fmt.Errorf("policy reload not applied: %w", err)
	}
	rl.cfg.Apply(p)
	return nil
}

// Watch reloads the policy whenever its file changes, until ctx
// ends. It watches the file's directory, so that editors that replace the
// file (write a new one, rename it into place) and symbolic-link swaps are
// seen.
func (rl *Reloader) Watch(ctx context.Context, path string) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watch policy: %w", err)
	}
	defer w.Close()
	dir := filepath.Dir(path)
	if err := w.Add(dir); err != nil {
		return fmt.Errorf("watch policy directory %s: %w", dir, err)
	}
	// The tests beside the policy too: a policy refused for its tests
	// applies once they are fixed.
	tests := policycase.BesidePath(path)
	settle := time.NewTimer(time.Hour)
	settle.Stop()
	defer settle.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-w.Events:
			if !ok {
				return nil
			}
			if n := filepath.Clean(ev.Name); n == filepath.Clean(path) || n == filepath.Clean(tests) || filepath.Base(n) == "..data" {
				settle.Reset(reloadSettle)
			}
		case err, ok := <-w.Errors:
			if !ok {
				return nil
			}
			rl.cfg.Log.Error("policy watcher", "err", err)
		case <-settle.C:
			data, err := readStable(path, reloadQuiet, time.Now())
			if errors.Is(err, errPolicyChanging) {
				settle.Reset(reloadSettle) // look again once it is quiet
				continue
			}
			if err == nil {
				err = rl.applyPolicy(ctx, path, data)
			} else {
				err = rl.refuseReload(ctx, path, nil, err, "")
			}
			if err != nil {
				rl.cfg.Log.Error("policy reload refused; the last good policy stays in force", "err", err)
			} else {
				rl.cfg.Log.Info("policy in force", "path", path, "sha256", rl.cfg.Current().SHA256)
			}
		}
	}
}
