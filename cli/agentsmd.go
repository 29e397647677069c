package cli

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"coily.dev/coily/client"
	coilyv1 "coily.dev/coily/proto/coily/v1"
)

func (a *App) agentsMDCmd() *cobra.Command {
	var as string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "agents-md [--as PRINCIPAL]",
		Short: "print the AGENTS.md / CLAUDE.md section that tells an agent how to use coily",
		Long: `Print a Markdown section for an agent's instructions (AGENTS.md, CLAUDE.md): what coily is,
exactly which commands the live policy lets you (or --as PRINCIPAL, e.g. sandbox:demo for a Cowork
folder; that needs the approve permission) run and with which environment variables, where they
run, what waits for the owner's approval, what the owner and the server refuse whatever is asked,
and what each refusal means and what to do about it. Regenerate it when the policy changes.`,
		Example: `  coily agents-md >> CLAUDE.md
  coily agents-md --as sandbox:demo >> ~/Cowork/project/AGENTS.md`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			return a.withClient(ctx, asJSON, func(c *client.Client) error {
				resp, err := c.API.ListCommands(ctx, &coilyv1.ListCommandsRequest{Principal: as})
				if err != nil {
					return err
				}
				if asJSON {
					return a.printProto(resp)
				}
				who := as
				if who == "" {
					if st, err := c.API.Status(ctx, &coilyv1.StatusRequest{}); err == nil {
						who = st.GetCaller().GetPrincipal()
					}
				}
				return AgentsMD(a.Stdout, resp, a.Name, who, time.Now())
			})
		},
	}
	cmd.Flags().StringVar(&as, "as", "", "the principal the section is for (default: you)")
	Twin(cmd.Flags(), "as", "COILY_AS")
	jsonFlag(cmd, &asJSON, "the commands (the ListCommands answer) instead of Markdown")
	return cmd
}

// AgentsMD writes the section: every line of it is built from the policy's
// names and patterns, printed as code and escaped (md), so a rule cannot
// smuggle instructions of its own into an agent's prompt.
func AgentsMD(w io.Writer, l *coilyv1.ListCommandsResponse, prog, who string, now time.Time) error {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	names := commandNames(l.GetCommands())
	p("<!-- %s agents-md: generated %s from the policy in force (sha256 %.12s) for %s; regenerate with `%s agents-md` -->",
		prog, now.UTC().Format("2006-01-02"), mdText(l.GetPolicySha256()), mdText(who), prog)
	p("## Privileged commands go through coily")
	p("")
	if len(names) == 0 {
		p("This environment holds no credentials of its own, and coily, the trust point that runs privileged commands for it, lets %s run **no command**. Do not look for tokens or other ways around it; ask the user.", mdText(who))
		_, err := io.WriteString(w, b.String())
		return err
	}
	p("This environment holds no credentials of its own. %s on **coily**, a trust point on the owner's machine that checks each call against the owner's policy, runs it in a sandbox (with the owner's credentials injected into that command alone, where its rule gives any) and records it. A rule that gives no credentials is there so that its command runs on the trust point, in the owner's workspace there. Run %s as usual (a shim on `PATH` forwards %s to coily), or explicitly as `%s exec -- %s …`. The output and exit code are the command's own.",
		codeList(names), them(names), them(names), prog, md(names[0]))
	p("")
	p("### What you may run")
	p("")
	p("| command | arguments | flags | environment | notes |")
	p("| --- | --- | --- | --- | --- |")
	for _, c := range l.GetCommands() {
		p("| `%s` | %s | %s | %s | %s |", md(c.GetCommand()), argsCell(c.GetArgs()), flagsCell(c.GetFlags()), envCell(c), notesCell(c, prog))
	}
	agentsMDDay(p, l, prog)
	agentsMDRefused(p, l)
	agentsMDGit(p, prog)
	_, err := io.WriteString(w, b.String())
	return err
}

// commandNames are the distinct command names, in policy order.
func commandNames(cmds []*coilyv1.CommandRule) []string {
	var out []string
	for _, c := range cmds {
		if !slices.Contains(out, c.GetCommand()) {
			out = append(out, c.GetCommand())
		}
	}
	return out
}

func codeList(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = "`" + md(n) + "`"
	}
	if len(q) == 1 {
		return "The command " + q[0] + " runs"
	}
	return "The commands " + strings.Join(q[:len(q)-1], ", ") + " and " + q[len(q)-1] + " run"
}

// them is the pronoun for names: it or them.
func them(names []string) string {
	if len(names) == 1 {
		return "it"
	}
	return "them"
}

func argsCell(args []string) string {
	if len(args) == 0 {
		return "none"
	}
	return "`" + md(strings.Join(args, " ")) + "`"
}

func flagsCell(flags []string) string {
	switch {
	case len(flags) == 0:
		return "none"
	case len(flags) == 1 && flags[0] == "any":
		return "any"
	}
	q := make([]string, len(flags))
	for i, f := range flags {
		q[i] = "`" + md(f) + "`"
	}
	return strings.Join(q, " ")
}

func notesCell(c *coilyv1.CommandRule, prog string) string {
	var notes []string
	if c.GetConfirm() {
		notes = append(notes, fmt.Sprintf("waits for the owner's approval (up to %s): say why with `%s exec --note`", c.GetConfirmTimeout().AsDuration(), prog))
	}
	if w := c.GetWritable(); len(w) > 0 {
		notes = append(notes, "may write "+codeSpans(w))
	}
	switch c.GetNetwork() {
	case "proxied":
		hosts := c.GetEgressHosts()
		if c.GetEgressMode() == "observe" {
			notes = append(notes, "network: any host, recorded")
		} else if len(hosts) > 0 {
			if len(hosts) > 6 {
				hosts = append(hosts[:6:6], "…")
			}
			notes = append(notes, "network: "+mdText(strings.Join(hosts, ", ")))
		}
	case "deny", "":
		notes = append(notes, "no network")
	}
	if r := c.GetRatePerMinute(); r > 0 {
		notes = append(notes, fmt.Sprintf("at most %d a minute", r))
	}
	if !c.GetPresent() {
		notes = append(notes, "not installed on the trust point")
	}
	if len(notes) == 0 {
		return ""
	}
	return strings.Join(notes, "; ")
}

// mdText makes policy text safe as Markdown prose (a deny rule's reason):
// md, and no link, image or emphasis of its own.
func mdText(s string) string {
	return md(strings.NewReplacer(`\`, `\\`, "[", `\[`, "]", `\]`, "*", `\*`, "_", `\_`).Replace(s))
}

// md makes policy text safe inside Markdown code spans and table cells:
// control characters escaped (Text), and no backtick, pipe, angle bracket
// or newline that would end a span or a cell or open HTML.
func md(s string) string {
	s = Text(s)
	return strings.NewReplacer("`", "'", "|", "\\|", "<", "‹", ">", "›").Replace(s)
}
