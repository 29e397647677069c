// Command coily is the coily trust point and its client: one binary for
// every role (serve, exec, lockout, ...). main stays thin: each subcommand
// lives in its own file and returns an exit code.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"syscall"

	"coily.dev/coily/gitcred"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

// env is what a subcommand runs with: its arguments after the global flags,
// the global settings and the standard streams.
type env struct {
	args   []string
	global *globalFlags
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
}

type command struct {
	summary string
	run     func(ctx context.Context, e *env) int
}

var commands = map[string]command{
	"serve":     {"run the trust point on the local socket (and the tailnet with --tailnet)", runServe},
	"dev":       {"run a private tailnet and the trust point on this machine (NOT for production)", runDev},
	"exec":      {"run a command on the trust point: exec [flags] -- ARGV...", runExec},
	"lockout":   {"nuclear stop: kill running commands, refuse everything until unlock", runLockout},
	"unlock":    {"lift a lockout (local operator only by default)", runUnlock},
	"pause":     {"soft stop: refuse new commands, let running ones finish", runPause},
	"resume":    {"lift a pause", runResume},
	"status":    {"show the server's state and who you are to it", runStatus},
	"sandbox":   {"sandbox check | sandbox exec [--workspace DIR] [--network MODE] [--egress-allow HOST...] -- ARGV...", runSandbox},
	"audit":     {"read the audit log: audit tail|show ID|verify|repair", runAudit},
	"state":     {"the state file, with the server stopped: state check|rebuild", runState},
	"policy":    {"check a policy file, or explain a decision: policy check FILE | explain -- ARGV...", runPolicy},
	"approvals": {"pending approvals: approvals list|watch|approve ID|deny ID [--note]", runApprovals},
	"bridge":    {"relay request files from network-less sandboxes: bridge --mount DIR[=SANDBOX]...", runBridge},
	"key":       {"sandbox signing keys: key bootstrap --sandbox NAME [--out FILE] | key rotate [--sandbox NAME [--out FILE]]", runKey},
	"version":   {"print the version", runVersion},
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("coily", flag.ContinueOnError)
	fs.SetOutput(stderr)
	g := registerGlobalFlags(fs)
	fs.Usage = func() { usage(stderr, fs) }
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	g.noteGiven(fs)
	if fs.NArg() == 0 {
		usage(stderr, fs)
		return 2
	}
	if fs.Arg(0) == "__netbridge" { // hidden: runs inside a proxied sandbox
		return runNetBridge(ctx, &env{args: fs.Args()[1:], global: g, stdin: stdin, stdout: stdout, stderr: stderr})
	}
	if fs.Arg(0) == EgressConnectCommand { // hidden: ssh's ProxyCommand inside a proxied sandbox
		return runEgressConnect(ctx, &env{args: fs.Args()[1:], global: g, stdin: stdin, stdout: stdout, stderr: stderr})
	}
	if fs.Arg(0) == gitcred.HelperCommand { // hidden: git's credential helper inside a sandbox
		return runGitCredential(ctx, &env{args: fs.Args()[1:], global: g, stdin: stdin, stdout: stdout, stderr: stderr})
	}
	cmd, ok := commands[fs.Arg(0)]
	if !ok {
		fmt.Fprintf(stderr, "coily: unknown command %q\n", fs.Arg(0))
		usage(stderr, fs)
		return 2
	}
	return cmd.run(ctx, &env{args: fs.Args()[1:], global: g, stdin: stdin, stdout: stdout, stderr: stderr})
}

func usage(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprintf(w, "usage: coily [global flags] COMMAND [flags] [args]\n\ncommands:\n")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-10s %s\n", n, commands[n].summary)
	}
	fmt.Fprintf(w, "\nglobal flags:\n")
	fs.PrintDefaults()
}

func runVersion(_ context.Context, e *env) int {
	fmt.Fprintf(e.stdout, "coily %s\n", version)
	return 0
}
