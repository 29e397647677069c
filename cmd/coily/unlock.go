package main

import (
	"context"
	"flag"
	"fmt"

	coilyv1 "coily.dev/coily/proto/coily/v1"
)

func runUnlock(ctx context.Context, e *env) int {
	fs := flag.NewFlagSet("unlock", flag.ContinueOnError)
	reason := stringFlag(fs, "reason", "COILY_REASON", "", "why (recorded in the audit log)")
	if code, ok := parseFlags(fs, e); !ok {
		return code
	}
	c, err := dial(ctx, e)
	if err != nil {
		return refused(e.stderr, err)
	}
	defer c.Close()
	resp, err := c.API.Unlock(ctx, &coilyv1.UnlockRequest{Reason: *reason})
	if err != nil {
		return refused(e.stderr, err)
	}
	fmt.Fprintf(e.stdout, "unlocked by %s\n", resp.GetLockout().GetBy())
	return 0
}
