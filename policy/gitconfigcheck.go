package policy

import (
	"fmt"
	"slices"
)

// gitConfigWarnings: an obligation on git push binds the request's
// arguments, but git reads more than its arguments. A push with no
// refspec pushes what the repository's configuration names, and a
// `remote.NAME.push` refspec with a `+`, or `remote.NAME.mirror`, forces
// without a flag. Where a rule may write .git/config in the workspace a
// push runs in, a command under it can make the next plain `git push` a
// force push that no obligation sees: reported, obligation by writer.
func (p *Policy) gitConfigWarnings() []Warning {
	var out []Warning
	for _, o := range p.rules {
		if !o.Obligation() || toolName(o.Binary, "") != "git" || len(o.Args.Args) == 0 || o.Args.Args[0] != "push" {
			continue
		}
		for _, w := range p.rules {
			if w.Effect != Allow || w.Workspace == WorkspaceTemp || !slices.Contains(w.Writable, ".git/config") {
				continue
			}
			out = append(out, Warning{Rule: o.Name, Line: o.Line, Msg: fmt.Sprintf(
				"rule %q may write .git/config in workspace %q: a remote.NAME.push refspec with + (or remote.NAME.mirror) written there makes a plain `git push` in that workspace force without a flag, which obligation %q cannot see in the arguments; keep .git/config read-only where pushes run, or confirm every push there",
				w.Name, w.Workspace, o.Name)})
		}
	}
	return out
}
