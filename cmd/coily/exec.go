package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
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
			printLine(e.stderr, "coily: stdin: more than %d bytes or unreadable", maxStdin)
			return client.RefusedExit
		}
		req.Stdin = data
	}
	x, done, err := execTransport(ctx, e, fs)
	if err != nil {
		return refused(e.stderr, err)
	}
	defer done()
	exit, err := x.Exec(ctx, req, e.stdout, e.stderr)
	if err != nil {
		return refused(e.stderr, err)
	}
	// A tool often reports a refused host as "could not connect": say
	// what the egress proxy refused, after the command's own output.
	for _, s := range exit.GetEgressDenied() {
		printLine(e.stderr, "coily: egress refused: %s", s)
	}
	// ssh says only "agent refused operation": say why.
	for _, s := range exit.GetSshAgentRefused() {
		printLine(e.stderr, "coily: %s", s)
	}
	return client.ExitCode(exit)
}

// execer runs one command: *client.Client over gRPC, *client.FSClient
// through a sandbox's shared folder. Both stream (or write) the output to
// the writers and return the exit status or a *refusal.Error, so the CLI
// prints and exits the same way whichever carried the request.
type execer interface {
	Exec(ctx context.Context, req *coilyv1.ExecRequest, stdout, stderr io.Writer) (*coilyv1.ExecExit, error)
}

// execTransport picks how exec reaches coily: through the shared folder
// when this process runs in a network-less sandbox (client.DetectSandbox)
// and the command line names no transport, else the connection dial
// picks. done releases it.
func execTransport(ctx context.Context, e *env, fs *flag.FlagSet) (execer, func(), error) {
	if client.DetectSandbox(os.Getenv) && !transportOnCommandLine(e.global, fs) {
		fc, err := sandboxClient()
		if err != nil {
			return nil, nil, fmt.Errorf("sandbox mode (%s=0 turns it off): %w", client.EnvSandboxRuntime, err)
		}
		return fc, func() {}, nil
	}
	c, err := dial(ctx, e)
	if err != nil {
		return nil, nil, err
	}
	c.OnApproval = func(a *coilyv1.Approval) {
		printLine(e.stderr, "coily: rule %q needs approval %s (expires %s); an approver runs: coily approvals approve %s",
			a.GetRule(), a.GetId(), a.GetExpiresAt().AsTime().Local().Format(time.Kitchen), a.GetId())
	}
	return c, func() { c.Close() }, nil
}

// sandboxClient is the filesystem transport: the shared folder from
// COILY_MOUNT or the working directory up, the key from COILY_KEY_FILE or
// ~/.coily/key. Interrupting exec (the context ending) tears the request
// down.
func sandboxClient() (*client.FSClient, error) {
	cwd, err := os.Getwd()
	if err != nil {
		return nil, err
	}
	mount, err := client.FindMount(os.Getenv, cwd)
	if err != nil {
		return nil, err
	}
	path, err := client.KeyPath(os.Getenv)
	if err != nil {
		return nil, err
	}
	key, err := client.ReadKeyFile(path)
	if err != nil {
		return nil, err
	}
	return &client.FSClient{Mount: mount, Key: key}, nil
}

// transportOnCommandLine reports whether --socket, --server, --tsnet or
// --dev was given on the command line (a COILY_* twin alone does not
// count). run's flag set records only --socket, so a global flag given
// before the subcommand is recognised by a value that differs from what
// its environment twin gives: the same value given both ways reads as not
// given.
func transportOnCommandLine(g *globalFlags, fs *flag.FlagSet) bool {
	given := g.socketGiven
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "socket", "server", "tsnet", "dev":
			given = true
		}
	})
	tsnetEnv, _ := strconv.ParseBool(os.Getenv("COILY_TSNET"))
	return given || *g.server != os.Getenv("COILY_SERVER") || *g.dev != os.Getenv("COILY_DEV") || *g.tsnet != tsnetEnv
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
