package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

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
	cwd := stringFlag(fs, "cwd", "COILY_CWD", "", "working directory, relative to the rule's workspace")
	envs := stringFlag(fs, "env", "COILY_EXEC_ENV", "", "comma-separated NAME=VALUE, or NAME to pass this process's value (the rule must allow each name)")
	if code, ok := parseFlags(fs, e); !ok {
		return code
	}
	if fs.NArg() == 0 {
		fmt.Fprintln(e.stderr, "usage: coily exec [flags] -- ARGV...")
		return 2
	}
	req := &coilyv1.ExecRequest{Argv: fs.Args(), Note: *note, Cwd: *cwd, Env: parseEnv(*envs)}
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
	c, err := dial(ctx, e)
	if err != nil {
		return refused(e.stderr, err)
	}
	defer c.Close()
	c.OnApproval = func(a *coilyv1.Approval) {
		fmt.Fprintf(e.stderr, "coily: rule %q needs approval %s (expires %s); an approver runs: coily approvals approve %s\n",
			a.GetRule(), a.GetId(), a.GetExpiresAt().AsTime().Local().Format(time.Kitchen), a.GetId())
	}
	exit, err := c.Exec(ctx, req, e.stdout, e.stderr)
	if err != nil {
		return refused(e.stderr, err)
	}
	return client.ExitCode(exit)
}

// parseEnv reads --env: NAME=VALUE pairs, or bare NAMEs whose value comes
// from this process's environment.
func parseEnv(spec string) map[string]string {
	if spec == "" {
		return nil
	}
	out := map[string]string{}
	for _, item := range strings.Split(spec, ",") {
		if name, value, ok := strings.Cut(item, "="); ok {
			out[name] = value
		} else if item != "" {
			out[item] = os.Getenv(item)
		}
	}
	return out
}
