package main

import (
	"context"
	"encoding/json"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"coily.dev/coily/cli"
	"coily.dev/coily/regularfile"
	"coily.dev/coily/sandbox"
	"coily.dev/coily/workspace"
)

// workspaceCmd is `coily workspace`: the workspaces the server refuses
// because it could not check them after a command, looked at and repaired
// on the trust point, beside a running server, as its user or root (they
// work on its state directory).
func workspaceCmd(a *cli.App) *cobra.Command {
	return group("workspace", "refused workspaces: check, repair",
		`A workspace the server could not check after a command (something it could not read, move aside or
restore; a scan out of its budget) may hold what that command planted: the server refuses the rules that
use it until its owner has looked and repaired it (docs/operations.md). Run these on the trust point, as
the server's user or root.`,
		command(a, spec{use: "check [NAME]", short: "list refused workspaces, what was moved aside in one, and whether the next scan passes",
			args: cobra.MaximumNArgs(1),
			flags: func(fs *pflag.FlagSet) runFunc {
				return func(_ context.Context, e *env) int { return workspaceCheck(e, e.global.StateDir) }
			}}),
		command(a, spec{use: "repair NAME", short: "lift the refusal of a workspace its owner has looked at, once its scan passes",
			args: cobra.ExactArgs(1),
			flags: func(fs *pflag.FlagSet) runFunc {
				return func(_ context.Context, e *env) int { return workspaceRepair(e, e.global.StateDir) }
			}}),
	)
}

// refusedNamed returns the refused workspaces named name (every one when
// name is empty).
func refusedNamed(e *env, dir, name string) ([]workspace.Refused, bool) {
	all, err := workspace.ListRefused(dir)
	if err != nil {
		printLine(e.stderr, "coily workspace: %v", err)
		return nil, false
	}
	var out []workspace.Refused
	for _, w := range all {
		if name == "" || w.Workspace == name {
			out = append(out, w)
		}
	}
	return out, true
}

// workspaceCheck prints the refused workspaces, or for one, why, what
// its quarantine directory holds, and whether the next scan passes. It
// exits 0 when nothing is refused (or the named one would pass).
func workspaceCheck(e *env, dir string) int {
	name := ""
	if len(e.args) > 0 {
		name = e.args[0]
	}
	refused, ok := refusedNamed(e, dir, name)
	if !ok {
		return 1
	}
	if len(refused) == 0 {
		printLine(e.stdout, "no refused workspace%s", map[bool]string{true: "", false: " named " + termText(name)}[name == ""])
		return 0
	}
	good := true
	for _, w := range refused {
		printLine(e.stdout, "workspace %s (%s): refused since %s, after request %s", termText(w.Workspace), termText(w.Root),
			w.Since.UTC().Format(time.RFC3339), termText(w.Request))
		for _, r := range w.Reasons {
			printLine(e.stdout, "  could not check: %s", termText(r))
		}
		if name == "" {
			continue
		}
		printMoved(e, w.Root)
		n, err := sandbox.CheckWorkspace(w.Root, sandbox.ScanBudget{})
		if err != nil {
			good = false
			printLine(e.stdout, "FAIL the next scan: %s", termText(err.Error()))
			continue
		}
		printLine(e.stdout, "ok   the next scan passes (%d protected entries)", n)
	}
	if name == "" {
		printLine(e.stdout, "`coily workspace check NAME` tells more")
		return 1
	}
	return exitFor(good)
}

// printMoved lists what the workspace's quarantine manifests say was
// moved there, and from where.
func printMoved(e *env, root string) {
	paths, _ := filepath.Glob(filepath.Join(root, sandbox.QuarantineDir, "*.json"))
	for _, p := range paths {
		data, err := regularfile.Read(p, 1<<20) // a FIFO or a huge file at a manifest name does not stall the listing
		if err != nil {
			printLine(e.stdout, "  %s: %s", termText(p), termText(err.Error()))
			continue
		}
		var m struct {
			Request string
			Entries []struct{ Name, Path, Why string }
		}
		if json.Unmarshal(data, &m) != nil {
			continue
		}
		for _, en := range m.Entries {
			printLine(e.stdout, "  moved aside after %s: %s -> %s/%s (%s)", termText(m.Request), termText(en.Path),
				sandbox.QuarantineDir, termText(en.Name), termText(en.Why))
		}
	}
}

// workspaceRepair lifts a workspace's refusal once its scan passes; the
// server audits the repair with the next command there.
func workspaceRepair(e *env, dir string) int {
	refused, ok := refusedNamed(e, dir, e.args[0])
	if !ok {
		return 1
	}
	if len(refused) == 0 {
		printLine(e.stderr, "coily workspace repair: no refused workspace named %s", termText(e.args[0]))
		return 1
	}
	for _, w := range refused {
		if _, err := sandbox.CheckWorkspace(w.Root, sandbox.ScanBudget{}); err != nil {
			printLine(e.stderr, "coily workspace repair: %s: the next scan would fail: %s (fix that first)", termText(w.Root), termText(err.Error()))
			return 1
		}
		if err := workspace.Repair(dir, w, localPrincipal(), time.Now()); err != nil {
			printLine(e.stderr, "coily workspace repair: %v", err)
			return 1
		}
		printLine(e.stdout, "workspace %s (%s) repaired: the server runs its rules again and audits the repair with the next one", termText(w.Workspace), termText(w.Root))
	}
	return 0
}
