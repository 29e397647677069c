// Command coily is the coily trust point and its client: one binary for
// every role (serve, bridge, exec, lockout, ...). The client commands come
// from package cli (shared with the lean coily-client); this binary adds
// the server-side ones, one file each, and the transports that run a
// tailnet node in-process. main stays thin.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"coily.dev/coily/cli"
	"coily.dev/coily/gitcred"
	"coily.dev/coily/version"
)

func main() {
	if code, ok := runHidden(os.Args[1:]); ok {
		os.Exit(code)
	}
	a := cli.NewApp("coily", version.Version())
	a.Commit = version.Commit()
	tsnetDialer(a)
	devDialer(a)
	os.Exit(a.Main(func(root *cobra.Command) { addCommands(a, root) }))
}

// addCommands registers the server-side commands.
func addCommands(a *cli.App, root *cobra.Command) {
	root.AddCommand(serveCmd(a), bridgeCmd(a), sandboxCmd(a), auditCmd(a), witnessCmd(a), stateCmd(a), policyCmd(a), keyCmd(a), workspaceCmd(a))
	addDevCommand(a, root)
}

// runHidden runs the commands a sandbox runs inside itself (the proxied
// network's bridge, ssh's ProxyCommand, git's credential helper): not for
// people, so outside the command tree, with their own arguments.
func runHidden(args []string) (int, bool) {
	if len(args) == 0 {
		return 0, false
	}
	var run runFunc
	switch args[0] {
	case "__netbridge":
		run = runNetBridge
	case EgressConnectCommand:
		run = runEgressConnect
	case gitcred.HelperCommand:
		run = runGitCredential
	default:
		return 0, false
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	e := &env{args: args[1:], stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr}
	return run(ctx, e), true
}
