package cli

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"coily.dev/coily/client"
	coilyv1 "coily.dev/coily/proto/coily/v1"
)

func (a *App) approvalsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "approvals",
		Short: "see and decide the approvals commands wait for",
		Long: `Commands of rules with confirm: true wait for an approver's decision. List the pending ones,
watch them arrive, approve or deny one (never your own request).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { cmd.Help(); return Exit(ExitUsage) },
	}
	cmd.AddCommand(a.approvalsListCmd(), a.approvalsWatchCmd(),
		a.approvalsDecideCmd("approve", coilyv1.Verdict_VERDICT_APPROVE),
		a.approvalsDecideCmd("deny", coilyv1.Verdict_VERDICT_DENY))
	return cmd
}

func (a *App) approvalsListCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "list the pending approvals, oldest first",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			return a.withClient(ctx, asJSON, func(c *client.Client) error {
				resp, err := c.API.ListApprovals(ctx, &coilyv1.ListApprovalsRequest{})
				if err != nil {
					return err
				}
				if asJSON {
					return a.printProto(resp)
				}
				if len(resp.GetApprovals()) == 0 {
					fmt.Fprintln(a.Stdout, "no pending approvals")
				}
				for _, ap := range resp.GetApprovals() {
					printApproval(a.Stdout, ap)
				}
				return nil
			})
		},
	}
	jsonFlag(cmd, &asJSON, "the approvals")
	return cmd
}

func (a *App) approvalsWatchCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "watch",
		Short: "print the pending approvals, then every change, until interrupted",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			return a.withClient(ctx, asJSON, func(c *client.Client) error {
				stream, err := c.API.WatchApprovals(ctx, &coilyv1.WatchApprovalsRequest{})
				if err != nil {
					return err
				}
				defer stream.Close()
				return watchApprovals(ctx, stream, func(ap *coilyv1.Approval) error {
					if asJSON {
						return writeJSONProto(a.Stdout, ap)
					}
					printApproval(a.Stdout, ap)
					return nil
				})
			})
		},
	}
	jsonFlag(cmd, &asJSON, "each approval (one JSON object a line)")
	return cmd
}

// watchApprovals prints the stream until it or ctx ends.
func watchApprovals(ctx context.Context, stream interface {
	Recv() (*coilyv1.WatchApprovalsResponse, error)
}, print func(*coilyv1.Approval) error) error {
	for {
		msg, err := stream.Recv()
		if err != nil {
			if ctx.Err() != nil || err == io.EOF {
				return nil
			}
			return err
		}
		if err := print(msg.GetApproval()); err != nil {
			return err
		}
	}
}

func (a *App) approvalsDecideCmd(name string, v coilyv1.Verdict) *cobra.Command {
	var note string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   name + " ID [--note TEXT]",
		Short: name + " a pending approval",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			return a.withClient(ctx, asJSON, func(c *client.Client) error {
				resp, err := c.API.Decide(ctx, &coilyv1.DecideRequest{Id: args[0], Verdict: v, Note: note})
				if err != nil {
					return err
				}
				if asJSON {
					return a.printProto(resp)
				}
				printApproval(a.Stdout, resp.GetApproval())
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&note, "note", "", "a note for the audit log and the requester")
	Twin(cmd.Flags(), "note", "COILY_NOTE")
	jsonFlag(cmd, &asJSON, "the decided approval")
	return cmd
}

func printApproval(w io.Writer, ap *coilyv1.Approval) {
	state := strings.ToLower(strings.TrimPrefix(ap.GetState().String(), "APPROVAL_STATE_"))
	line := fmt.Sprintf("%s  %-9s %s wants rule %q: %s", ap.GetId(), state, ap.GetRequester(), ap.GetRule(), Argv(ap.GetArgv()))
	if by := ap.GetAllowedBy(); by != "" {
		line += fmt.Sprintf("  (admitted by rule %q)", by)
	}
	if ap.GetState() == coilyv1.ApprovalState_APPROVAL_STATE_PENDING {
		line += fmt.Sprintf("  (expires %s)", ap.GetExpiresAt().AsTime().Local().Format(time.TimeOnly))
	} else if ap.GetDecidedBy() != "" {
		line += fmt.Sprintf("  (by %s)", ap.GetDecidedBy())
	}
	if n := ap.GetRequestNote(); n != "" {
		line += fmt.Sprintf("  note: %s", n)
	}
	PrintLine(w, "%s", line)
	// The rest of what will run, indented under it.
	if c := ap.GetCwd(); c != "" {
		PrintLine(w, "    in %s", c)
	}
	if env := ap.GetEnv(); len(env) > 0 {
		var kv []string
		for _, k := range slices.Sorted(maps.Keys(env)) {
			kv = append(kv, k+"="+env[k])
		}
		PrintLine(w, "    env %s", Argv(kv))
	}
	if n := ap.GetStdinBytes(); n > 0 {
		more := ""
		if int64(len(ap.GetStdinHead())) < n {
			more = "…"
		}
		PrintLine(w, "    stdin %d bytes, sha256 %s: %s%s", n, ap.GetStdinSha256(), ap.GetStdinHead(), more)
	}
}
