package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"coily.dev/coily/client"
	coilyv1 "coily.dev/coily/proto/coily/v1"
)

func runApprovals(ctx context.Context, e *env) int {
	return dispatch(ctx, e, "approvals", "usage: coily approvals list | watch | approve ID [--note TEXT] | deny ID [--note TEXT]",
		map[string]subcommand{
			"list":  approvalsList,
			"watch": approvalsWatch,
			"approve": func(ctx context.Context, e *env) int {
				return approvalsDecide(ctx, e, coilyv1.Verdict_VERDICT_APPROVE)
			},
			"deny": func(ctx context.Context, e *env) int { return approvalsDecide(ctx, e, coilyv1.Verdict_VERDICT_DENY) },
		})
}

func approvalsList(ctx context.Context, e *env) int {
	return withClient(ctx, e, func(c *client.Client) error {
		resp, err := c.API.ListApprovals(ctx, &coilyv1.ListApprovalsRequest{})
		if err != nil {
			return err
		}
		if len(resp.GetApprovals()) == 0 {
			fmt.Fprintln(e.stdout, "no pending approvals")
		}
		for _, a := range resp.GetApprovals() {
			printApproval(e.stdout, a)
		}
		return nil
	})
}

// approvalsWatch prints the pending approvals, then every change, until
// interrupted.
func approvalsWatch(ctx context.Context, e *env) int {
	c, err := dial(ctx, e)
	if err != nil {
		return refused(e.stderr, err)
	}
	defer c.Close()
	stream, err := c.API.WatchApprovals(ctx, &coilyv1.WatchApprovalsRequest{})
	if err != nil {
		return refused(e.stderr, err)
	}
	for {
		msg, err := stream.Recv()
		if err != nil {
			if ctx.Err() != nil || err == io.EOF {
				return 0
			}
			return refused(e.stderr, err)
		}
		printApproval(e.stdout, msg.GetApproval())
	}
}

func approvalsDecide(ctx context.Context, e *env, v coilyv1.Verdict) int {
	fs := flag.NewFlagSet("approvals", flag.ContinueOnError)
	note := stringFlag(fs, "note", "COILY_NOTE", "", "note for the audit log and the requester")
	// Accept the flag before or after the id.
	var id string
	if len(e.args) > 0 && !strings.HasPrefix(e.args[0], "-") {
		id, e.args = e.args[0], e.args[1:]
	}
	if code, ok := parseFlags(fs, e); !ok {
		return code
	}
	if id == "" && fs.NArg() == 1 {
		id = fs.Arg(0)
	}
	if id == "" {
		fmt.Fprintln(e.stderr, "usage: coily approvals approve|deny ID [--note TEXT]")
		return 2
	}
	return withClient(ctx, e, func(c *client.Client) error {
		resp, err := c.API.Decide(ctx, &coilyv1.DecideRequest{Id: id, Verdict: v, Note: *note})
		if err == nil {
			printApproval(e.stdout, resp.GetApproval())
		}
		return err
	})
}

func printApproval(w io.Writer, a *coilyv1.Approval) {
	state := strings.ToLower(strings.TrimPrefix(a.GetState().String(), "APPROVAL_STATE_"))
	line := fmt.Sprintf("%s  %-9s %s wants rule %q: %s", a.GetId(), state, a.GetRequester(), a.GetRule(), termArgv(a.GetArgv()))
	if a.GetState() == coilyv1.ApprovalState_APPROVAL_STATE_PENDING {
		line += fmt.Sprintf("  (expires %s)", a.GetExpiresAt().AsTime().Local().Format(time.TimeOnly))
	} else if a.GetDecidedBy() != "" {
		line += fmt.Sprintf("  (by %s)", a.GetDecidedBy())
	}
	if n := a.GetRequestNote(); n != "" {
		line += fmt.Sprintf("  note: %s", n)
	}
	printLine(w, "%s", line)
}
