package main

import (
	"context"
	"flag"

	"coily.dev/coily/client"
	coilyv1 "coily.dev/coily/proto/coily/v1"
)

func runLockout(ctx context.Context, e *env) int {
	fs := flag.NewFlagSet("lockout", flag.ContinueOnError)
	reason := stringFlag(fs, "reason", "COILY_REASON", "", "why (recorded in the state and the audit log)")
	if code, ok := parseFlags(fs, e); !ok {
		return code
	}
	return withClient(ctx, e, func(c *client.Client) error {
		resp, err := c.API.Lockout(ctx, &coilyv1.LockoutRequest{Reason: *reason})
		if err != nil {
			return err
		}
		printLine(e.stdout, "locked out by %s; %d running command(s) signalled. `coily unlock` on the host lifts it.",
			resp.GetLockout().GetBy(), resp.GetKilled())
		return nil
	})
}
