package server

import (
	"context"
	"slices"
	"sync"

	"coily.dev/coily/audit"
	"coily.dev/coily/cmdtext"
	"coily.dev/coily/sandbox"
	"coily.dev/coily/scrub"

	"errors"
	"os"
	"path/filepath"
	"strings"

	"coily.dev/coily/policy"
	"coily.dev/coily/refusal"
)

// workDir returns the command's workspace root (a named directory, or home
// for a temporary workspace), resolved, and the directory it runs in: the
// root joined with the caller's cwd, which must stay inside the workspace
// once every symbolic link is resolved.
func (s *Server) workDir(x *execution, home string) (root, dir string, err error) {
	root = home
	if name := x.rule.Workspace; name != policy.WorkspaceTemp {
		named, ok := x.policy.Workspace(name)
		if !ok {
			return "", "", refusal.New(refusal.Internal, "workspace %q of rule %q is not defined", name, x.rule.Name)
		}
		root = named
	}
	if root, err = resolveInside(root, ""); err != nil {
		return "", "", err
	}
	if name := x.rule.Workspace; name != policy.WorkspaceTemp {
		// A link in the workspace's path that changed since the policy
		// loaded was put there by someone (a command in an enclosing
		// directory): never follow it to a new place. The sandbox then
		// opens root without following any link, closing the race.
		if atLoad := x.policy.WorkspaceAtLoad(name); root != atLoad {
			return "", "", refusal.New(refusal.PolicyDeny, "workspace %q now resolves to %s, not %s as when the policy was loaded: a symbolic link in its path changed; reload the policy if that is intended", name, root, atLoad)
		}
	}
	if root != home {
		if h := homeWithin(root, s.userHomes()); h != "" {
			return "", "", refusal.New(refusal.PolicyDeny, "workspace %q is or contains the home directory %s: a home's dotfiles are its user's configuration and secrets; name a directory inside it", x.rule.Workspace, h)
		}
	}
	dir, err = resolveInside(root, x.req.GetCwd())
	return root, dir, err
}

// resolveInside resolves rel inside root. The check is made on fully
// resolved paths; a symbolic link swapped in after the check is the
// sandbox's to contain (it binds only the workspace).
func resolveInside(root, rel string) (string, error) {
	realRoot, err := filepath.EvalSymlinks(root)
	if err != nil {
		return "", refusal.Wrap(refusal.Internal, err, "workspace is not available")
	}
	if rel == "" {
		return realRoot, nil
	}
	if filepath.IsAbs(rel) {
		return "", refusal.New(refusal.BadRequest, "cwd must be relative to the workspace")
	}
	target, err := filepath.EvalSymlinks(filepath.Join(realRoot, filepath.Clean(rel)))
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return "", refusal.New(refusal.BadRequest, "cwd %q does not exist in the workspace", rel)
		}
		return "", refusal.Wrap(refusal.BadRequest, err, "cwd %q cannot be resolved", rel)
	}
	if r, err := filepath.Rel(realRoot, target); err != nil || r == ".." || strings.HasPrefix(r, "../") {
		return "", refusal.New(refusal.PolicyDeny, "cwd %q escapes the workspace", rel)
	}
	if fi, err := os.Stat(target); err != nil || !fi.IsDir() {
		return "", refusal.New(refusal.BadRequest, "cwd %q is not a directory", rel)
	}
	return target, nil
}

// homeWithin returns a home directory (of a user of this host, or one of
// extra) that root is or contains, "" when none.
func homeWithin(root string, extra []string) string {
	homes := slices.Clone(extra)
	if data, err := os.ReadFile("/etc/passwd"); err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			if f := strings.Split(line, ":"); len(f) >= 7 && f[5] != "" && f[5] != "/" && !strings.HasSuffix(f[6], "nologin") && !strings.HasSuffix(f[6], "false") {
				homes = append(homes, f[5])
			}
		}
	}
	for _, h := range homes {
		real, err := filepath.EvalSymlinks(h)
		if err != nil {
			continue
		}
		if real == root || strings.HasPrefix(real, root+string(filepath.Separator)) {
			return h
		}
	}
	return ""
}

// workspaceLocks serialises commands in each named workspace.
type workspaceLocks struct {
	mu   sync.Mutex
	busy map[string]chan struct{} // closed when the holder is done
}

// lock waits until no other command runs in the workspace at root, or ctx
// ends. The returned function releases it.
func (w *workspaceLocks) lock(ctx context.Context, root string) (func(), error) {
	for {
		w.mu.Lock()
		if w.busy == nil {
			w.busy = map[string]chan struct{}{}
		}
		held, ok := w.busy[root]
		if !ok {
			done := make(chan struct{})
			w.busy[root] = done
			w.mu.Unlock()
			return func() {
				w.mu.Lock()
				delete(w.busy, root)
				w.mu.Unlock()
				close(done)
			}, nil
		}
		w.mu.Unlock()
		select {
		case <-held:
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
	}
}

// addReport records what the sandbox observed in the result's audit
// record: protected entries the command created and that were
// quarantined, and how it was bounded.
func addReport(rec *audit.Record, r sandbox.Report, secrets *scrub.Set) {
	// The names are the command's: made safe to show with its secrets.
	setList(rec, "quarantined", cmdtext.Strings(cmdtext.List(secrets, r.Quarantined)))
	setList(rec, "restored_modes", cmdtext.Strings(cmdtext.List(secrets, r.Restored)))
	if r.QuarantineErr != nil {
		setDetail(rec, "quarantine_error", cmdtext.New(secrets, r.QuarantineErr.Error()).String())
	}
	if r.Limits != "" {
		setDetail(rec, "limits", r.Limits)
	}
}

// setDetail sets one detail of rec.
func setDetail(rec *audit.Record, key, value string) {
	if rec.Details == nil {
		rec.Details = map[string]string{}
	}
	rec.Details[key] = value
}

// setList sets one list of rec, unless it has no items.
func setList(rec *audit.Record, key string, items []string) {
	if len(items) == 0 {
		return
	}
	if rec.Lists == nil {
		rec.Lists = map[string][]string{}
	}
	rec.Lists[key] = items
}
