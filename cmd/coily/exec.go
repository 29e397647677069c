package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"google.golang.org/protobuf/types/known/durationpb"

	"coily.dev/coily/client"
	coilyv1 "coily.dev/coily/proto/coily/v1"
)

// maxStdin mirrors the server's stdin limit; more is refused before sending.
const maxStdin = 1 << 20

func runExec(ctx context.Context, e *env) int {
	fs := flag.NewFlagSet("exec", flag.ContinueOnError)
	timeout := durationFlag(fs, "timeout", "COILY_TIMEOUT", 0, "timeout (0: the rule's)")
	sendStdin := boolFlag(fs, "stdin", "COILY_STDIN", "send this process's standard input (up to 1 MiB) to the command")
	note := stringFlag(fs, "note", "COILY_NOTE", "", "note recorded in the audit log")
	if code, ok := parseFlags(fs, e); !ok {
		return code
	}
	if fs.NArg() == 0 {
		fmt.Fprintln(e.stderr, "usage: coily exec [flags] -- ARGV...")
		return 2
	}
	req := &coilyv1.ExecRequest{Argv: fs.Args(), Note: *note}
	if *timeout > 0 {
		req.Timeout = durationpb.New(*timeout)
	}
	if *sendStdin {
		data, err := io.ReadAll(io.LimitReader(e.stdin, maxStdin+1))
		if err != nil || len(data) > maxStdin {
			fmt.Fprintf(e.stderr, "coily: stdin: more than %d bytes or unreadable\n", maxStdin)
			return client.RefusedExit
		}
		req.Stdin = data
	}
	c, err := dial(e)
	if err != nil {
		return refused(e.stderr, err)
	}
	defer c.Close()
	exit, err := c.Exec(ctx, req, e.stdout, e.stderr)
	if err != nil {
		return refused(e.stderr, err)
	}
	return client.ExitCode(exit)
}
