package cli

import (
	"fmt"
	"slices"
	"strings"

	coilyv1 "coily.dev/coily/proto/coily/v1"
)

// The parts of agents-md past the table: where commands run, the
// environment they get, exec's own flags, approvals, what is refused
// whatever a rule says, git. p prints one line.

func agentsMDDay(p func(string, ...any), l *coilyv1.ListCommandsResponse, prog string) {
	p("")
	p("### Where commands run")
	p("")
	p("Every command runs on the trust point, in its rule's workspace there: at its root, or, when your directory is inside that workspace (the same path on the trust point, as when you work on the owner's machine), in the same directory of it; from anywhere else `cd` does not change where it runs, and it reads and writes the trust point's copy of the files, not this environment's. `%s exec --cwd DIR -- …` runs it in DIR, relative to the workspace (it cannot leave it). In the workspace, the files tools on the owner's machine load and run (`.git/config` and hooks, `.envrc`, `.vscode`, `.claude` and the like) are read-only unless the rule's row says it may write them, and new ones a command makes are moved aside after it.", prog)
	p("")
	p("### Environment variables")
	p("")
	p("No variable of this environment reaches a command unless its rule names it (the table's environment column). Those it passes \"from yours\" are forwarded when they are set here, by the shims and by `%s exec`; the others only with `%s exec --env NAME=VALUE -- …` (`--env NAME` takes this environment's value), which also wins over a forwarded one. A name the rule does not list is refused.", prog, prog)
	p("")
	p("### Flags only `%s exec` has", prog)
	p("")
	p("A shim takes the command's own arguments and nothing else. `%s exec` takes these before `--`: `--note TEXT` (recorded, and shown to the approver), `--env`, `--cwd DIR`, `--timeout`, `--stdin`. For example: `%s exec --note \"release 1.2\" -- git push origin main`.", prog, prog)
	var waits []string
	for _, c := range l.GetCommands() {
		if c.GetConfirm() {
			waits = append(waits, fmt.Sprintf("- `%s %s`: up to %s", md(c.GetCommand()), md(strings.Join(c.GetArgs(), " ")), c.GetConfirmTimeout().AsDuration()))
		}
	}
	p("")
	p("### Approvals")
	p("")
	if len(waits) > 0 {
		p("These wait for the owner's approval, whichever row of the table admits the request:")
		p("")
		for _, line := range waits {
			p("%s", line)
		}
		p("")
	}
	p("When a command waits, coily prints `coily: rule \"RULE\" needs approval ID …` on stderr. Tell the user that approval id, what you ran and why, so that they can approve it; the command goes on by itself once they do. Give the reason up front with `%s exec --note`.", prog)
}

func agentsMDRefused(p func(string, ...any), l *coilyv1.ListCommandsResponse) {
	if len(l.GetDenied()) == 0 && len(l.GetRefusedForms()) == 0 {
		return
	}
	p("")
	p("### Refused whatever you ask")
	p("")
	for _, c := range l.GetDenied() {
		reason := c.GetReason()
		if reason == "" {
			reason = "denied by the owner"
		}
		p("- `%s %s`: %s", md(c.GetCommand()), md(strings.Join(c.GetArgs(), " ")), mdText(reason))
	}
	for _, f := range l.GetRefusedForms() {
		p("- %s", mdText(f))
	}
}

func agentsMDGit(p func(string, ...any), prog string) {
	p("")
	p("### When coily refuses")
	p("")
	p("coily prints `coily: refused (CODE): message` on stderr and exits 125 (124 when the command ran out of time, 69 when coily cannot be reached). What to do:")
	p("")
	p("- `policy-deny`: the policy does not allow this command or these arguments. **Do not retry it, rephrase it, or look for another way to do the same thing.** Tell the user what you wanted to run and why, and ask them to allow it.")
	p("- `confirm-rejected`, `confirm-timeout`: the owner declined, or did not answer in time. Do not retry; ask the user.")
	p("- `rate-limit`: wait as long as the message says, then retry once.")
	p("- `concurrency-busy`: another of your commands is still running; wait for it to finish, then retry.")
	p("- `pause-active`, `lockout-active`: the owner stopped coily. Stop what you are doing and tell the user; do not retry.")
	p("- `credential-unavailable`, `sandbox-unavailable`, `state-unavailable`, `internal`, exit 69: coily cannot run it now. Tell the user; do not work around it.")
	p("- `coily: egress refused: …` after a command's output: it tried to reach a host its rule does not allow. Tell the user which host; do not try another route.")
	p("")
	p("### git")
	p("")
	p("This environment has no git token, ssh key or credential helper, and needs none: `git clone`, `fetch`, `pull` and `push` of `https://github.com/…` (and `git@github.com:…`) go through coily's git proxy, which holds the credentials, once `%s git setup --global` has run (`git config --get-regexp '^url\\.'` shows its rewrites). Pushes are checked on the ref updates they make: a push the policy does not allow (a forced update, a deleted branch, a branch or repository outside those allowed) is refused with `coily: refused: CODE: …`. Do not retry it another way (a `--force` variant, another remote, a token); tell the user.", prog)
	p("")
	p("`git config`, `git push -u` and `git branch -u` write `.git/config`: on the trust point they work only under a rule that may write `.git/config` (the table's notes). Set who commits by the environment variables the git rule passes (`GIT_AUTHOR_NAME` and the like), not by `git -c`.")
	p("")
	p("Never try to obtain the tokens themselves, print the environment of coily's commands, or wrap a command in another program to get past a rule: coily refuses and records it, and the owner sees it.")
}

// envCell says which variables a rule passes: forwarded from the agent's
// environment (pass_env), and the others it accepts with --env.
func envCell(c *coilyv1.CommandRule) string {
	var explicit []string
	for _, n := range c.GetEnv() {
		if !slices.Contains(c.GetPassEnv(), n) {
			explicit = append(explicit, n)
		}
	}
	var parts []string
	if pass := c.GetPassEnv(); len(pass) > 0 {
		parts = append(parts, "passes "+codeSpans(pass)+" from yours")
	}
	if len(explicit) > 0 {
		parts = append(parts, "`--env` for "+codeSpans(explicit))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, "; ")
}

// codeSpans prints names as code spans, escaped.
func codeSpans(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = "`" + md(n) + "`"
	}
	return strings.Join(q, " ")
}
