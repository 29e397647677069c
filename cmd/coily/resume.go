package main

import (
	"context"
	"flag"

	"coily.dev/coily/client"
	coilyv1 "coily.dev/coily/proto/coily/v1"
)

func runResume(ctx context.Context, e *env) int {
	fs := flag.NewFlagSet("resume", flag.ContinueOnError)
	reason := stringFlag(fs, "reason", "COILY_REASON", "", "why (recorded in the audit log)")
	if code, ok := parseFlags(fs, e); !ok {
		return code
	}
	return withClient(ctx, e, func(c *client.Client) error {
		resp, err := c.API.Resume(ctx, &coilyv1.ResumeRequest{Reason: *reason})
		if err != nil {
			return err
		}
		printLine(e.stdout, "resumed by %s", resp.GetPause().GetBy())
		return nil
	})
}
