package server

import (
	"context"
	"fmt"
	"slices"
	"time"

	"coily.dev/coily/access"
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

// refuseUnchecked refuses the execution's workspace when the check after
// the command could not cover it (unchecked, one line each): it may hold
// something planted that coily could not check or move aside, so no rule
// using it runs until its owner has looked and repaired it. Other
// workspaces, and the server, go on. Only when even the refusal cannot be
// kept does the server lock out (fail closed).
func (s *Server) refuseUnchecked(ctx context.Context, x *execution, unchecked []string) {
	if len(unchecked) == 0 || x.root == "" || x.root == x.home {
		return
	}
	ctx = context.WithoutCancel(ctx)
	// The lines name what the command made: kept, logged, audited and
	// shown to later callers only made safe, with this exec's secrets.
	unchecked = cmdtext.Strings(cmdtext.List(x.scrub, unchecked))
	w := RefusedWorkspace{Workspace: x.rule.Workspace, Root: x.root, Request: x.id, Since: s.cfg.Now(), Reasons: unchecked}
	rec := access.CallerRecord(access.ServerCaller, "", EventWorkspaceRefused, fmt.Sprintf("workspace %q could not be checked after request %s: refused until `coily workspace repair %s`", w.Workspace, x.id, w.Workspace))
	rec.RequestID = x.id
	rec.Details = map[string]string{"workspace": w.Workspace}
	rec.Lists = map[string][]string{"unchecked": unchecked}
	err := RefuseWorkspace(s.cfg.StateDir, w)
	if err != nil {
		rec.Details["refusal_error"] = err.Error()
	}
	if _, aerr := s.record(ctx, rec); aerr != nil {
		s.log.Error("audit a refused workspace", "err", aerr)
	}
	if err == nil {
		s.log.Error("workspace refused: "+rec.Reason, "request_id", x.id, "unchecked", unchecked)
		return
	}
	reason := fmt.Sprintf("workspace %q could not be checked after request %s, and its refusal could not be kept (%v): %s", w.Workspace, x.id, err, strings.Join(unchecked, "; "))
	s.log.Error("locking out: "+reason, "request_id", x.id)
	if _, _, lerr := s.lockout(ctx, access.ServerCaller, reason); lerr != nil {
		s.log.Error("lockout after a failed workspace check", "err", lerr)
	}
}

// EventWorkspaceRefused and EventWorkspaceRepaired are the audit events of
// a workspace's refusal and of its repair.
const (
	EventWorkspaceRefused  = "workspace.refused"
	EventWorkspaceRepaired = "workspace.repair"
)

// workspaceUsable refuses a command in a refused workspace, naming the
// repair, and audits a repair made since the last command there.
func (s *Server) workspaceUsable(ctx context.Context, x *execution) error {
	if rep, ok, _ := workspaceRefusal(s.cfg.StateDir, x.root, repairedSuffix); ok {
		rec := audit.Record{Event: EventWorkspaceRepaired, Principal: rep.RepairedBy, Transport: "local", Decision: "allow",
			Reason:  fmt.Sprintf("workspace %q repaired (refused after request %s)", rep.Workspace, rep.Request),
			Details: map[string]string{"workspace": rep.Workspace, "refused_request": rep.Request, "repaired": rep.Repaired.UTC().Format(time.RFC3339)}}
		if _, err := s.record(ctx, rec); err != nil {
			return refusal.Wrap(refusal.Internal, err, "audit log unavailable")
		}
		if err := os.Remove(workspaceFile(s.cfg.StateDir, x.root, repairedSuffix)); err != nil {
			s.log.Error("remove a workspace's repair record", "err", err)
		}
	}
	w, ok, err := workspaceRefusal(s.cfg.StateDir, x.root, refusedSuffix)
	if !ok {
		return nil
	}
	why := strings.Join(w.Reasons, "; ")
	if err != nil {
		why = err.Error()
	}
	return refusal.New(refusal.SandboxUnavailable, "workspace %q is refused since %s: it could not be checked after request %s (%s); its owner looks at it (and at its %s directory), then runs `coily workspace repair %s` on the trust point",
		x.rule.Workspace, w.Since.UTC().Format(time.RFC3339), w.Request, why, sandbox.QuarantineDir, x.rule.Workspace)
}

// addReport records what the sandbox observed in the result's audit
// record: protected entries the command created and that were
// quarantined, and how it was bounded.
func addReport(rec *audit.Record, r sandbox.Report, secrets *scrub.Set) {
	// The names are the command's: made safe to show with its secrets.
	setList(rec, "quarantined", cmdtext.Strings(cmdtext.List(secrets, r.Quarantined)))
	setList(rec, "restored_modes", cmdtext.Strings(cmdtext.List(secrets, r.Restored)))
	setList(rec, "moved_aside", cmdtext.Strings(cmdtext.List(secrets, r.Aside)))
	setList(rec, "unchecked", cmdtext.Strings(cmdtext.List(secrets, r.Unchecked)))
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
