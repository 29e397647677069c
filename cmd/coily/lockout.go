package main

import (
	"context"
	"flag"
	"fmt"

	coilyv1 "coily.dev/coily/proto/coily/v1"
)

func runLockout(ctx context.Context, e *env) int {
	fs := flag.NewFlagSet("lockout", flag.ContinueOnError)
	reason := stringFlag(fs, "reason", "COILY_REASON", "", "why (recorded in the state and the audit log)")
	if code, ok := parseFlags(fs, e); !ok {
		return code
	}
	c, err := dial(ctx, e)
	if err != nil {
		return refused(e.stderr, err)
	}
	defer c.Close()
	resp, err := c.API.Lockout(ctx, &coilyv1.LockoutRequest{Reason: *reason})
	if err != nil {
		return refused(e.stderr, err)
	}
	fmt.Fprintf(e.stdout, "locked out by %s; %d running command(s) signalled. `coily unlock` on the host lifts it.\n",
		resp.GetLockout().GetBy(), resp.GetKilled())
	return 0
}
