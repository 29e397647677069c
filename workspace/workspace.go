// Package workspace owns where a command runs: its workspace root (a
// directory the policy names, or its private home for a temporary
// workspace) and the working directory in it, the scratch directory each
// command's private home and files are made in, and the workspaces the
// server refuses because the check after a command could not cover them
// (until `coily workspace repair`). The scan of a workspace's protected
// entries before and after a command is the sandbox's (package sandbox);
// the server serialises commands per workspace (package stops).
//
// Invariants:
//   - a command's working directory is inside its workspace once every
//     symbolic link is resolved, and a named workspace resolves where it
//     did when the policy loaded;
//   - no workspace is or contains a user's home directory;
//   - a refused workspace runs nothing until its owner repairs it, and the
//     refusal survives restarts (a file in the state directory); when even
//     the refusal cannot be kept, the server locks out (fail closed);
//   - each command's private directory is named with 128 random bits.
package workspace

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"coily.dev/coily/policy"
	"coily.dev/coily/refusal"
)

// Resolve returns the command's workspace root (the directory of the
// rule's named workspace under p, or home for a temporary workspace),
// resolved, and the directory it runs in: the root joined with the
// caller's cwd, which must stay inside the workspace once every symbolic
// link is resolved. userHomes are homes no workspace may be or contain,
// besides those of the host's users.
func Resolve(p *policy.Policy, rule *policy.Rule, home, cwd string, userHomes []string) (root, dir string, err error) {
	root = home
	if name := rule.Workspace; name != policy.WorkspaceTemp {
		named, ok := p.Workspace(name)
		if !ok {
			return "", "", refusal.New(refusal.Internal, "workspace %q of rule %q is not defined", name, rule.Name)
		}
		root = named
	}
	if root, err = resolveInside(root, ""); err != nil {
		return "", "", err
	}
	if name := rule.Workspace; name != policy.WorkspaceTemp {
		// A link in the workspace's path that changed since the policy
		// loaded was put there by someone (a command in an enclosing
		// directory): never follow it to a new place. The sandbox then
		// opens root without following any link, closing the race.
		if atLoad := p.WorkspaceAtLoad(name); root != atLoad {
			return "", "", refusal.New(refusal.PolicyDeny, "workspace %q now resolves to %s, not %s as when the policy was loaded: a symbolic link in its path changed; reload the policy if that is intended", name, root, atLoad)
		}
	}
	if root != home {
		if h := homeWithin(root, userHomes); h != "" {
			return "", "", refusal.New(refusal.PolicyDeny, "workspace %q is or contains the home directory %s: a home's dotfiles are its user's configuration and secrets; name a directory inside it", rule.Workspace, h)
		}
	}
	dir, err = resolveInside(root, cwd)
	return root, dir, err
}

// CallerCwd is the request's cwd for rule: cwd itself when given, else
// the caller's own directory (absolute, ExecRequest.caller_dir) relative
// to the rule's named workspace, when it lies inside it and resolves
// there, else "" (the root). The server calls it once the rule is known,
// before an approver sees the request, so that the directory the approver
// and the audit log see is the one the command runs in (Resolve checks it
// again then).
func CallerCwd(p *policy.Policy, rule *policy.Rule, cwd, caller string) string {
	if cwd != "" || caller == "" || rule.Workspace == policy.WorkspaceTemp {
		return cwd
	}
	written, ok := p.Workspace(rule.Workspace)
	if !ok {
		return ""
	}
	root, err := resolveInside(written, "")
	if err != nil {
		return ""
	}
	dir, ok := callerInside(root, written, caller)
	if !ok {
		return ""
	}
	if rel, err := filepath.Rel(root, dir); err == nil && rel != "." {
		return rel
	}
	return ""
}

// callerInside maps the caller's own directory into the workspace whose
// resolved root is root (written: as the policy names it): the directory,
// when the caller's absolute path lies under either and resolves inside
// the workspace (a link out is not followed out); false otherwise, and
// the caller's directory is then ignored.
func callerInside(root, written, caller string) (string, bool) {
	if !filepath.IsAbs(caller) {
		return "", false
	}
	caller = filepath.Clean(caller)
	for _, base := range []string{root, written} {
		rel, err := filepath.Rel(base, caller)
		if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
			continue
		}
		if dir, err := resolveInside(root, rel); err == nil {
			return dir, true
		}
	}
	return "", false
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
