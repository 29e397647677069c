package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"coily.dev/coily/client"
	"coily.dev/coily/refusal"
)

// dial connects to the server the global flags name, picking the
// transport in this order: the local socket when --socket is on the command
// line, a coily dev tailnet (--dev / COILY_DEV), an ephemeral tsnet node of
// our own (--tsnet with --server), the OS's tailscale (--server), the local
// socket.
func dial(ctx context.Context, e *env) (*client.Client, error) {
	g := e.global
	switch {
	case g.socketGiven:
		return client.DialLocal(g.socketPath())
	case *g.dev != "":
		if !validDevAs(*g.devAs) {
			return nil, fmt.Errorf("COILY_DEV_AS must be owner, agent or stranger, got %q", *g.devAs)
		}
		return client.DialDev(ctx, *g.dev, *g.devAs)
	case *g.tsnet:
		if *g.server == "" {
			return nil, errors.New("--tsnet needs --server HOST[:PORT]")
		}
		return client.DialTSNet(ctx, client.TSNetOptions{Server: *g.server, ControlURL: *g.controlURL,
			AuthKey: os.Getenv("TS_AUTHKEY")})
	case *g.server != "":
		return client.DialServer(*g.server)
	}
	return client.DialLocal(g.socketPath())
}

func validDevAs(as string) bool { return as == "owner" || as == "agent" || as == "stranger" }

// refused prints a refusal the one way the CLI does and returns the exit
// code for it.
func refused(w io.Writer, err error) int {
	var r *refusal.Error
	if !errors.As(err, &r) {
		r = refusal.FromStatus(err)
	}
	printLine(w, "coily: refused (%s): %s", r.Code, r.Msg)
	return client.RefusedExit
}

// withClient dials the server the global flags name, runs call, and turns
// a failure into the CLI's refusal output and exit code.
func withClient(ctx context.Context, e *env, call func(*client.Client) error) int {
	c, err := dial(ctx, e)
	if err != nil {
		return refused(e.stderr, err)
	}
	defer c.Close()
	if err := call(c); err != nil {
		return refused(e.stderr, err)
	}
	return 0
}

// subcommand is one subcommand of a group such as `coily audit`.
type subcommand func(ctx context.Context, e *env) int

// dispatch runs the subcommand e.args[0] names, with the arguments after it.
func dispatch(ctx context.Context, e *env, group, usage string, subs map[string]subcommand) int {
	if len(e.args) == 0 {
		fmt.Fprintln(e.stderr, usage)
		return 2
	}
	sub, ok := subs[e.args[0]]
	if !ok {
		printLine(e.stderr, "coily %s: unknown subcommand %q", group, e.args[0])
		fmt.Fprintln(e.stderr, usage)
		return 2
	}
	return sub(ctx, &env{args: e.args[1:], global: e.global, stdin: e.stdin, stdout: e.stdout, stderr: e.stderr})
}
