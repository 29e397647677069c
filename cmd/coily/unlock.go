package main

import (
	"context"
	"flag"

	"coily.dev/coily/client"
	coilyv1 "coily.dev/coily/proto/coily/v1"
)

func runUnlock(ctx context.Context, e *env) int {
	fs := flag.NewFlagSet("unlock", flag.ContinueOnError)
	reason := stringFlag(fs, "reason", "COILY_REASON", "", "why (recorded in the audit log)")
	if code, ok := parseFlags(fs, e); !ok {
		return code
	}
	return withClient(ctx, e, func(c *client.Client) error {
		resp, err := c.API.Unlock(ctx, &coilyv1.UnlockRequest{Reason: *reason})
		if err != nil {
			return err
		}
		printLine(e.stdout, "unlocked by %s", resp.GetLockout().GetBy())
		return nil
	})
}
