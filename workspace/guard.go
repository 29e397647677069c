package workspace

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"coily.dev/coily/access"
	"coily.dev/coily/audit"
	"coily.dev/coily/cmdtext"
	"coily.dev/coily/refusal"
	"coily.dev/coily/sandbox"
	"coily.dev/coily/scrub"
)

// EventRefused and EventRepaired are the audit events of a workspace's
// refusal and of its repair.
const (
	EventRefused  = "workspace.refused"
	EventRepaired = "workspace.repair"
)

// Guard keeps the refused workspaces of a server: it refuses a command in
// one, audits a repair, and refuses a workspace the check after a command
// could not cover.
type Guard struct {
	// StateDir keeps the refusals (RefusalsDir).
	StateDir string
	// Record writes an audit record, fsynced.
	Record func(context.Context, audit.Record) (audit.Record, error)
	// Lockout locks the server out, when a refusal cannot be kept.
	Lockout func(ctx context.Context, reason string) error
	Log     *slog.Logger
	Now     func() time.Time
}

// Command is where one command runs: its rule's workspace, the
// workspace's root, the command's private home and its request id.
type Command struct {
	Workspace, Root, Home, Request string
}

// RefuseUnchecked refuses the command's workspace when the check after
// the command could not cover it (unchecked, one line each): it may hold
// something planted that coily could not check or move aside, so no rule
// using it runs until its owner has looked and repaired it. Other
// workspaces, and the server, go on. Only when even the refusal cannot be
// kept does the server lock out (fail closed).
func (g Guard) RefuseUnchecked(ctx context.Context, c Command, secrets *scrub.Set, unchecked []string) {
	if len(unchecked) == 0 || c.Root == "" || c.Root == c.Home {
		return
	}
	ctx = context.WithoutCancel(ctx)
	// The lines name what the command made: kept, logged, audited and
	// shown to later callers only made safe, with this exec's secrets.
	unchecked = cmdtext.Strings(cmdtext.List(secrets, unchecked))
	w := Refused{Workspace: c.Workspace, Root: c.Root, Request: c.Request, Since: g.Now(), Reasons: unchecked}
	rec := access.CallerRecord(access.ServerCaller, "", EventRefused, fmt.Sprintf("workspace %q could not be checked after request %s: refused until `coily workspace repair %s`", w.Workspace, c.Request, w.Workspace))
	rec.RequestID = c.Request
	rec.Details = map[string]string{"workspace": w.Workspace}
	rec.Lists = map[string][]string{"unchecked": unchecked}
	err := Refuse(g.StateDir, w)
	if err != nil {
		rec.Details["refusal_error"] = err.Error()
	}
	if _, aerr := g.Record(ctx, rec); aerr != nil {
		g.Log.Error("audit a refused workspace", "err", aerr)
	}
	if err == nil {
		g.Log.Error("workspace refused: "+rec.Reason, "request_id", c.Request, "unchecked", unchecked)
		return
	}
	reason := fmt.Sprintf("workspace %q could not be checked after request %s, and its refusal could not be kept (%v): %s", w.Workspace, c.Request, err, strings.Join(unchecked, "; "))
	g.Log.Error("locking out: "+reason, "request_id", c.Request)
	if lerr := g.Lockout(ctx, reason); lerr != nil {
		g.Log.Error("lockout after a failed workspace check", "err", lerr)
	}
}

// Usable refuses a command in a refused workspace, naming the repair, and
// audits a repair made since the last command there.
func (g Guard) Usable(ctx context.Context, c Command) error {
	if rep, ok, _ := readRefusal(g.StateDir, c.Root, repairedSuffix); ok {
		rec := audit.Record{Event: EventRepaired, Principal: rep.RepairedBy, Transport: "local", Decision: "allow",
			Reason:  fmt.Sprintf("workspace %q repaired (refused after request %s)", rep.Workspace, rep.Request),
			Details: map[string]string{"workspace": rep.Workspace, "refused_request": rep.Request, "repaired": rep.Repaired.UTC().Format(time.RFC3339)}}
		if _, err := g.Record(ctx, rec); err != nil {
			return refusal.Wrap(refusal.Internal, err, "audit log unavailable")
		}
		if err := os.Remove(refusalFile(g.StateDir, c.Root, repairedSuffix)); err != nil {
			g.Log.Error("remove a workspace's repair record", "err", err)
		}
	}
	w, ok, err := readRefusal(g.StateDir, c.Root, refusedSuffix)
	if !ok {
		return nil
	}
	why := strings.Join(w.Reasons, "; ")
	if err != nil {
		why = err.Error()
	}
	return refusal.New(refusal.SandboxUnavailable, "workspace %q is refused since %s: it could not be checked after request %s (%s); its owner looks at it (and at its %s directory), then runs `coily workspace repair %s` on the trust point",
		c.Workspace, w.Since.UTC().Format(time.RFC3339), w.Request, why, sandbox.QuarantineDir, c.Workspace)
}
