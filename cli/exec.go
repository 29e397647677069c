package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/types/known/durationpb"

	"coily.dev/coily/client"
	"coily.dev/coily/client/folder"
	"coily.dev/coily/client/passenv"
	coilyv1 "coily.dev/coily/proto/coily/v1"
)

// maxStdin mirrors the server's stdin limit; more is refused before sending.
const maxStdin = 1 << 20

// Values of exec's --stdin.
const (
	stdinAuto   = "auto"
	stdinAlways = "true"
	stdinNever  = "false"
)

type execFlags struct {
	timeout time.Duration
	stdin   string
	note    string
	cwd     string
	env     []string
	json    bool
}

func (a *App) execCmd() *cobra.Command {
	var f execFlags
	cmd := &cobra.Command{
		Use:   "exec [flags] -- ARGV...",
		Short: "run a command on the trust point, as its policy allows",
		Long: `Run a command on the trust point: argv[0] is a bare command name the server resolves from its
policy (gh, git, aws) or an absolute path; the rest pass verbatim (no shell). The command's
output streams back, and exec exits with the command's own exit code, or 124 when it ran out of
time, 125 when coily refused (stderr: "coily: refused (CODE): message"), 69 when the server
cannot be reached. Inside a network-less sandbox (SANDBOX_RUNTIME=1, …) the request goes
through the shared folder unless --socket or --server says otherwise.`,
		Example: `  coily exec -- gh issue create --repo alice/app --title "Flaky test"
  echo body | coily exec --stdin=true -- gh issue comment 7 --body-file -
  coily exec --timeout 2m --note "release" -- git push origin main`,
		Args: ArgsAfterDash("command"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return exit(a.runExec(cmd.Context(), f, args[cmd.ArgsLenAtDash():]))
		},
	}
	fs := cmd.Flags()
	fs.DurationVar(&f.timeout, "timeout", 0, "the command's time limit (0: the rule's)")
	Twin(fs, "timeout", "COILY_TIMEOUT")
	fs.StringVar(&f.stdin, "stdin", stdinAuto, "send standard input (up to 1 MiB) to the command: true (--stdin alone), false, or auto (when it is not a terminal and has data or its end to read within 50ms; a pipe left idle is not sent, and a notice on stderr says so)")
	fs.Lookup("stdin").NoOptDefVal = stdinAlways
	Twin(fs, "stdin", "COILY_STDIN")
	fs.StringVar(&f.note, "note", "", "a note recorded in the audit log (and shown to an approver)")
	Twin(fs, "note", "COILY_NOTE")
	fs.StringVar(&f.cwd, "cwd", "", "working directory, relative to the rule's workspace")
	Twin(fs, "cwd", "COILY_CWD")
	// An array, not a slice: a value may hold commas (--env A=x,y is one
	// variable); the twin likewise holds one NAME=VALUE or NAME, verbatim.
	fs.StringArrayVar(&f.env, "env", nil, "NAME=VALUE, or NAME to pass this process's value (the rule must allow each name; those it lists in pass_env are passed without it); repeat for more, a value is taken verbatim (commas included); the environment twin holds one")
	Twin(fs, "env", "COILY_EXEC_ENV")
	fs.BoolVar(&f.json, "json", false, "print a refusal as one JSON object on stderr (the command's own output is unchanged)")
	Twin(fs, "json", "COILY_JSON")
	return cmd
}

// execer runs one command: *client.Client over gRPC, *folder.Client
// through a sandbox's shared folder. Both stream (or write) the output to
// the writers and return the exit status or a refusal, so the CLI prints
// and exits the same way whichever carried the request.
type execer interface {
	Exec(ctx context.Context, req *coilyv1.ExecRequest, stdout, stderr io.Writer) (*coilyv1.ExecExit, error)
}

func (a *App) runExec(ctx context.Context, f execFlags, argv []string) int {
	req := &coilyv1.ExecRequest{Argv: argv, Note: f.note, Cwd: f.cwd, Env: a.parseEnv(f.env)}
	if f.cwd == "" {
		// Run where the caller is, when that is inside the rule's
		// workspace on the trust point (the server decides).
		req.CallerDir, _ = os.Getwd()
	}
	if f.timeout < 0 {
		PrintLine(a.Stderr, "%s: --timeout must not be negative", a.Name)
		return ExitUsage
	}
	if f.timeout > 0 {
		req.Timeout = durationpb.New(f.timeout)
	}
	send, err := a.sendStdin(f.stdin)
	if err != nil {
		PrintLine(a.Stderr, "%s: %v", a.Name, err)
		return ExitUsage
	}
	if send {
		data, err := io.ReadAll(io.LimitReader(a.Stdin, maxStdin+1))
		if err != nil || len(data) > maxStdin {
			PrintLine(a.Stderr, "coily: stdin: more than %d bytes or unreadable", maxStdin)
			return ExitRefused
		}
		req.Stdin = data
	}
	x, done, err := a.execTransport(ctx)
	if err != nil {
		return Refusal(a.Stderr, err, f.json)
	}
	defer done()
	after := a.offerPassEnv(ctx, x, req)
	exit, err := x.Exec(ctx, req, a.Stdout, a.Stderr)
	after(exit.GetPolicySha256())
	if code := interruptedCode(ctx); err != nil && code != 0 {
		// Ctrl-C (or a SIGTERM) ended the request, and the server killed
		// the command: exit as a local tool killed by that signal would.
		return code
	}
	if err != nil {
		return Refusal(a.Stderr, err, f.json)
	}
	// A tool often reports a refused host as "could not connect": say
	// what the egress proxy refused, after the command's own output.
	for _, s := range exit.GetEgressDenied() {
		PrintLine(a.Stderr, "coily: egress refused: %s", s)
	}
	// ssh says only "agent refused operation": say why.
	for _, s := range exit.GetSshAgentRefused() {
		PrintLine(a.Stderr, "coily: %s", s)
	}
	return client.ExitCode(exit)
}

// sendStdin decides whether standard input goes with the request
// (stdinDecision) and, when auto leaves a pipe unsent, says so on stderr
// in one line: the command then sees no input, which would otherwise
// look like an empty one.
func (a *App) sendStdin(mode string) (bool, error) {
	send, notice, err := stdinDecision(mode, a.stdinState)
	if notice {
		PrintLine(a.Stderr, "%s: standard input not sent: nothing to read on it within %v (--stdin=true sends it anyway, --stdin=false silences this)", a.Name, client.StdinWait)
	}
	return send, err
}

// stdinDecision decides whether standard input goes with the request:
// always, never, or (auto) when it is not a terminal and has something to
// read (data or its end) within stdinWait: a pipe or a file, as a shim's
// caller would feed the tool. A pipe a harness leaves open without writing
// to it is not read, so the command is not held up by it; notice says to
// tell the user so. state is looked at only for auto.
func stdinDecision(mode string, state func() client.StdinState) (send, notice bool, err error) {
	switch strings.ToLower(mode) {
	case stdinAlways, "1", "yes":
		return true, false, nil
	case stdinNever, "0", "no", "":
		return false, false, nil
	case stdinAuto:
		switch state() {
		case client.StdinReady:
			return true, false, nil
		case client.StdinIdle:
			return false, true, nil
		}
		return false, false, nil
	}
	return false, false, fmt.Errorf("--stdin %q: want true, false or auto", mode)
}

// stdinState looks at the App's standard input (client.LookAtStdin).
func (a *App) stdinState() client.StdinState { return client.LookAtStdin(a.Stdin) }

// execTransport picks how exec reaches coily: through the shared folder
// when this process runs in a network-less sandbox and the command line
// names no transport, else the connection Dial picks. done releases it.
func (a *App) execTransport(ctx context.Context) (execer, func(), error) {
	if a.inSandbox() {
		fc, err := a.sandboxClient()
		if err != nil {
			return nil, nil, fmt.Errorf("sandbox mode (%s=0 turns it off): %w", folder.EnvSandboxRuntime, err)
		}
		return fc, func() {}, nil
	}
	c, err := a.Dial(ctx)
	if err != nil {
		return nil, nil, err
	}
	c.OnApproval = func(ap *coilyv1.Approval) {
		PrintLine(a.Stderr, "coily: rule %q needs approval %s (expires %s); an approver runs: coily approvals approve %s",
			ap.GetRule(), ap.GetId(), ap.GetExpiresAt().AsTime().Local().Format(time.Kitchen), ap.GetId())
	}
	return c, func() { c.Close() }, nil
}

// parseEnv reads --env: NAME=VALUE pairs, or bare NAMEs whose value comes
// from this process's environment.
func (a *App) parseEnv(items []string) map[string]string {
	if len(items) == 0 {
		return nil
	}
	out := map[string]string{}
	for _, item := range items {
		if name, value, ok := strings.Cut(item, "="); ok {
			out[name] = value
		} else if item != "" {
			out[item] = a.Getenv(item)
		}
	}
	return out
}

// offerPassEnv forwards with req the variables the live policy's rules
// for its command list in pass_env (package passenv), when x reaches the
// server over gRPC (the shared folder carries no pass_env); the function
// it returns refreshes the kept names when the command ran under another
// policy. A name --env gives keeps --env's value (the server's rule).
func (a *App) offerPassEnv(ctx context.Context, x execer, req *coilyv1.ExecRequest) func(policy string) {
	c, ok := x.(*client.Client)
	if !ok {
		return func(string) {}
	}
	cache := passenv.Path(a.Settings())
	names := passenv.Prepare(ctx, c.API, cache)
	req.PassEnv = names.Offer(req.GetArgv()[0], a.Getenv)
	return func(policy string) { passenv.After(ctx, c.API, cache, names, policy) }
}
