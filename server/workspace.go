package server

import (
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
