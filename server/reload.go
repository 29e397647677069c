package server

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"

	"coily.dev/coily/audit"
	"coily.dev/coily/policy"
)

// A changed policy file is read once it has been quiet: no event for
// reloadSettle (editors write in several steps), and unmodified for
// reloadQuiet by its mtime (a writer pausing mid-file, in place); it must
// not change while being read (size, mtime). A writer pausing longer than
// reloadQuiet mid-file can still have a prefix read; if that prefix is a
// valid policy it would apply: write policies by rename (editors do).
const (
	reloadSettle = 250 * time.Millisecond
	reloadQuiet  = time.Second
)

// errPolicyChanging reports a policy file still being written.
var errPolicyChanging = errors.New("policy file is being written")

// ReloadPolicy loads the policy file at path and, if it is valid and
// differs from the policy in force, puts it in force for new requests
// (requests already admitted keep the rule they were admitted under). An
// invalid file changes nothing: the last good policy stays in force, and
// the refusal is logged and audited.
func (s *Server) ReloadPolicy(ctx context.Context, path string) error {
	data, err := readStable(path, 0, time.Now())
	if err != nil {
		return err
	}
	return s.applyPolicy(ctx, path, data)
}

// readStable reads the policy file, requiring it unmodified for quiet (by
// its mtime) and unchanged while read; errPolicyChanging otherwise.
func readStable(path string, quiet time.Duration, now time.Time) ([]byte, error) {
	before, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if before.Size() > policy.MaxFileSize {
		return nil, fmt.Errorf("policy file larger than %d bytes", policy.MaxFileSize)
	}
	if age := now.Sub(before.ModTime()); age < quiet {
		return nil, fmt.Errorf("%w (modified %s ago)", errPolicyChanging, age.Round(time.Millisecond))
	}
	data, err := os.ReadFile(path)
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
	return data, nil
}

// applyPolicy parses a policy file's content and puts it in force, or
// audits the refusal.
func (s *Server) applyPolicy(ctx context.Context, path string, data []byte) error {
	old := s.Policy()
	rec := audit.Record{Event: "policy.reload", Principal: "server", Details: map[string]string{"path": path, "old_sha256": old.SHA256}}
	p, err := policy.ParseFile(path, data)
	if err != nil {
		rec.Decision, rec.Code, rec.Reason = "refuse", "policy-invalid", err.Error()
		if _, aerr := s.record(ctx, rec); aerr != nil {
			return fmt.Errorf("policy reload refused (%w), and the refusal could not be audited: %w", err, aerr)
		}
		return err
	}
	if p.SHA256 == old.SHA256 {
		return nil
	}
	rec.Decision, rec.Details["new_sha256"] = "allow", p.SHA256
	// Audited before it takes effect: a policy change that cannot be
	// recorded does not happen.
	if _, err := s.record(ctx, rec); err != nil {
		return fmt.Errorf("policy reload not applied: %w", err)
	}
	s.policy.Store(p)
	s.metrics.rules(p)
	logAbsentBinaries(s, p)
	return nil
}

// WatchPolicy reloads the policy whenever its file changes, until ctx
// ends. It watches the file's directory, so that editors that replace the
// file (write a new one, rename it into place) and symbolic-link swaps are
// seen.
func (s *Server) WatchPolicy(ctx context.Context, path string) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watch policy: %w", err)
	}
	defer w.Close()
	dir := filepath.Dir(path)
	if err := w.Add(dir); err != nil {
		return fmt.Errorf("watch policy directory %s: %w", dir, err)
	}
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
			if filepath.Clean(ev.Name) == filepath.Clean(path) || filepath.Base(ev.Name) == "..data" {
				settle.Reset(reloadSettle)
			}
		case err, ok := <-w.Errors:
			if !ok {
				return nil
			}
			s.log.Error("policy watcher", "err", err)
		case <-settle.C:
			data, err := readStable(path, reloadQuiet, time.Now())
			if errors.Is(err, errPolicyChanging) {
				settle.Reset(reloadSettle) // look again once it is quiet
				continue
			}
			if err == nil {
				err = s.applyPolicy(ctx, path, data)
			}
			if err != nil {
				s.log.Error("policy reload refused; the last good policy stays in force", "err", err)
			} else {
				s.log.Info("policy in force", "path", path, "sha256", s.Policy().SHA256)
			}
		}
	}
}

// logAbsentBinaries warns about rules that cannot match on this host.
func logAbsentBinaries(s *Server, p *policy.Policy) {
	for _, r := range p.Rules() {
		if r.Absent != nil {
			s.log.Warn("rule cannot match on this host", "rule", r.Name, "why", r.Absent)
		}
	}
}
