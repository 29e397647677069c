package main

import (
	"context"
	"flag"
	"fmt"

	coilyv1 "coily.dev/coily/proto/coily/v1"
)

func runPause(ctx context.Context, e *env) int {
	fs := flag.NewFlagSet("pause", flag.ContinueOnError)
	reason := stringFlag(fs, "reason", "COILY_REASON", "", "why (recorded in the state and the audit log)")
	if code, ok := parseFlags(fs, e); !ok {
		return code
	}
	c, err := dial(ctx, e)
	if err != nil {
		return refused(e.stderr, err)
	}
	defer c.Close()
	resp, err := c.API.Pause(ctx, &coilyv1.PauseRequest{Reason: *reason})
	if err != nil {
		return refused(e.stderr, err)
	}
	fmt.Fprintf(e.stdout, "paused by %s; %d command(s) still running will finish. `coily resume` lifts it.\n",
		resp.GetPause().GetBy(), resp.GetRunning())
	return 0
}
