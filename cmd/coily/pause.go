package main

import (
	"context"
	"flag"

	"coily.dev/coily/client"
	coilyv1 "coily.dev/coily/proto/coily/v1"
)

func runPause(ctx context.Context, e *env) int {
	fs := flag.NewFlagSet("pause", flag.ContinueOnError)
	reason := stringFlag(fs, "reason", "COILY_REASON", "", "why (recorded in the state and the audit log)")
	if code, ok := parseFlags(fs, e); !ok {
		return code
	}
	return withClient(ctx, e, func(c *client.Client) error {
		resp, err := c.API.Pause(ctx, &coilyv1.PauseRequest{Reason: *reason})
		if err != nil {
			return err
		}
		printLine(e.stdout, "paused by %s; %d command(s) still running will finish. `coily resume` lifts it.",
			resp.GetPause().GetBy(), resp.GetRunning())
		return nil
	})
}
