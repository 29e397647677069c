// Command coily-exec runs one command on the coily trust point, as
// `coily exec -- COMMAND ARG...` does, in a process that does next to
// nothing else: one Exec on the local socket with coily's client (package
// client, the stack every client uses), without the command line of
// coily, so that an agent's every `gh` or `git` costs little more than the
// command on the trust point (docs/benchmarks.md).
//
//	coily-exec [--] COMMAND [ARG...]
//
// Named after a command (a link gh -> coily-exec, as `coily shim install`
// makes where coily-exec sits beside coily), it runs that command with all
// its arguments: `gh issue list` is `coily exec -- gh issue list`. Named
// coily (a link beside coily-client), it runs `coily exec -- ARGV...`
// itself and hands every other command line to coily-client unchanged.
//
// It takes no flags. The variables the rules for the command list in
// pass_env are forwarded from its environment (package passenv), as coily
// exec forwards them. Standard input is sent as `--stdin=auto` sends it,
// output streams back, and the exit code is the command's, or 124 (out of
// time), 125 (refused: "coily: refused (CODE): message" on stderr), 69
// (the server cannot be reached), 128+N (interrupted by signal N). Where
// the server is comes from the resolver every client uses
// (client.SettingsFromEnv); any route but the local socket — a sandbox's
// shared folder, a tailnet server, a `coily dev` (COILY_DEV) — and any
// COILY_* setting of coily exec's flags (client.ExecEnv) is handed to `coily
// exec` (coily-client or coily beside this binary, else coily on PATH;
// coily first for COILY_DEV and COILY_TSNET, which coily-client cannot
// reach), which replaces this process.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	coilyv1 "coily.dev/coily/proto/coily/v1"
	"coily.dev/coily/refusal"

	"coily.dev/coily/client"
	"coily.dev/coily/client/passenv"
	"coily.dev/coily/version"
	"coily.dev/coily/visible"
)

// Exit codes, as coily exec's (cli/exit.go).
const (
	exitUsage       = 2
	exitUnreachable = 69
	exitTimeout     = 124
	exitRefused     = 125
)

// maxStdin is the server's stdin limit; more is refused before sending.
const maxStdin = 1 << 20

const self = "coily-exec"

// dispatcher is the name under which coily-exec stands in for the whole
// command line: `coily exec -- ARGV...` it runs itself, every other
// command line it hands to coily-client beside it, unchanged (as git hands
// `git foo` to git-foo).
const dispatcher = "coily"

// handedOff marks the environment of what coily-exec hands a command to,
// so that a copy of coily-exec found where coily was looked for does not
// hand it on again.
const handedOff = "COILY_EXEC_HANDED_OFF"

const usage = `usage: coily-exec [--] COMMAND [ARG...]
Run COMMAND on the coily trust point, as "coily exec -- COMMAND ARG..." does.
Named after a command (a link gh -> coily-exec), run that command with every argument.
Named coily (a link beside coily-client), run "coily exec -- COMMAND ARG..." and hand every
other command line to coily-client.
No flags: for --timeout, --note, --cwd, --env or --json use coily exec (or their COILY_* twins, which
coily-exec hands to it).
`

func main() {
	os.Exit(run(os.Args, os.Getenv, os.Stdin, os.Stdout, os.Stderr))
}

func run(args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) int {
	argv, whole, code := commandLine(args, stdout, stderr)
	if whole {
		return handOff(args[1:], "", false, stderr) // coily status, coily exec --timeout …: coily-client's
	}
	if argv == nil {
		return code
	}
	settings := client.SettingsFromEnv(getenv)
	if why := handOffReason(settings, getenv); why != "" {
		route := settings.Where(true)
		return handOff(append([]string{"exec", "--"}, argv...), why, route == client.RouteDev || route == client.RouteTsnet, stderr)
	}
	req := &coilyv1.ExecRequest{Argv: argv}
	req.CallerDir, _ = os.Getwd() // run there when it lies inside the rule's workspace (the server decides)
	switch client.LookAtStdin(stdin) {
	case client.StdinReady:
		data, err := io.ReadAll(io.LimitReader(stdin, maxStdin+1))
		if err != nil || len(data) > maxStdin {
			printLine(stderr, "coily: stdin: more than %d bytes or unreadable", maxStdin)
			return exitRefused
		}
		req.Stdin = data
	case client.StdinIdle:
		printLine(stderr, "coily: standard input not sent: nothing to read on it within %v (COILY_STDIN=true sends it anyway, COILY_STDIN=false silences this)", client.StdinWait)
	}
	ctx, interrupted := signals()
	c, err := client.DialLocal(settings.SocketPath())
	if err != nil {
		return refused(stderr, err)
	}
	defer c.Close()
	c.OnApproval = func(ap *coilyv1.Approval) {
		printLine(stderr, "coily: rule %q needs approval %s (expires %s); an approver runs: coily approvals approve %s",
			ap.GetRule(), ap.GetId(), ap.GetExpiresAt().AsTime().Local().Format(time.Kitchen), ap.GetId())
	}
	cache := passenv.Path(settings)
	names := passenv.Prepare(ctx, c.API, cache)
	req.PassEnv = names.Offer(argv[0], getenv)
	exit, err := c.Exec(ctx, req, stdout, stderr)
	passenv.After(ctx, c.API, cache, names, exit.GetPolicySha256())
	if sig := interrupted(); err != nil && sig != 0 {
		return 128 + sig
	}
	if err != nil {
		return refused(stderr, err)
	}
	for _, s := range exit.GetEgressDenied() {
		printLine(stderr, "coily: egress refused: %s", s)
	}
	for _, s := range exit.GetSshAgentRefused() {
		printLine(stderr, "coily: %s", s)
	}
	return client.ExitCode(exit)
}

// commandLine reads the command to run: the arguments after an optional
// "--"; called by another name (a shim), that name and every argument;
// called as coily, the ARGV of `coily exec -- ARGV...`, or whole when the
// command line is any other (coily-client's, unchanged). A nil argv
// without whole means exit with code.
func commandLine(args []string, stdout, stderr io.Writer) (argv []string, whole bool, code int) {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return nil, false, exitUsage
	}
	switch name := filepath.Base(args[0]); {
	case name == dispatcher && len(args) > 3 && args[1] == "exec" && args[2] == "--":
		return args[3:], false, 0
	case name == dispatcher:
		return nil, true, 0
	case name != self && !strings.HasPrefix(name, self+"."):
		return append([]string{name}, args[1:]...), false, 0
	}
	rest := args[1:]
	switch {
	case len(rest) > 0 && rest[0] == "--":
		rest = rest[1:]
	case len(rest) > 0 && (rest[0] == "-h" || rest[0] == "--help" || rest[0] == "help"):
		fmt.Fprint(stdout, usage)
		return nil, false, 0
	case len(rest) > 0 && rest[0] == "--version":
		fmt.Fprintln(stdout, self, version.Line())
		return nil, false, 0
	case len(rest) > 0 && strings.HasPrefix(rest[0], "-"):
		printLine(stderr, "coily-exec: unknown flag %s: coily-exec takes none (use coily exec)", rest[0])
		return nil, false, exitUsage
	}
	if len(rest) == 0 {
		fmt.Fprint(stderr, usage)
		return nil, false, exitUsage
	}
	return rest, false, 0
}

// handOffReason says why coily exec, not this process, must make the
// call: the resolver's route is not the local socket, or a setting of
// exec's is set (client.ExecEnv). "" for the plain case.
func handOffReason(s client.Settings, getenv func(string) string) string {
	switch route := s.Where(true); {
	case route == client.RouteFolder:
		return "in a sandbox"
	case route != client.RouteSocket:
		return "the server is reached by " + string(route)
	}
	for _, name := range client.ExecEnv {
		if getenv(name) != "" {
			return name + " is set"
		}
	}
	return ""
}

// handOff replaces this process with coily's command line given args
// (`exec -- ARGV...`, or a whole command line as the dispatcher): with
// coily-client or coily beside this binary, else coily on PATH, never
// with this binary itself (coily may be a link to it). It returns only
// when none can be run.
func handOff(args []string, why string, fullFirst bool, stderr io.Writer) int {
	if os.Getenv(handedOff) != "" {
		// A coily-exec handed this here: another copy of it stands where
		// coily was looked for. Stop rather than hand it round again.
		printLine(stderr, "coily-exec: handed on by another coily-exec: the coily it found is a coily-exec too; put coily-client beside it")
		return exitRefused
	}
	var candidates []string
	exe, err := os.Executable()
	if err == nil {
		if real, err := filepath.EvalSymlinks(exe); err == nil {
			exe = real
		}
		dir := filepath.Dir(exe)
		candidates = append(candidates, filepath.Join(dir, "coily-client"), filepath.Join(dir, "coily"))
		if fullFirst { // coily dev, a node of its own: the lean coily-client has neither
			candidates[0], candidates[1] = candidates[1], candidates[0]
		}
	}
	if p, err := exec.LookPath("coily"); err == nil {
		candidates = append(candidates, p)
	}
	self, _ := os.Stat(exe)
	for _, c := range candidates {
		st, err := os.Stat(c)
		if err != nil || !st.Mode().IsRegular() || st.Mode()&0o111 == 0 || self != nil && os.SameFile(st, self) {
			continue // not there, or this very file (coily may be a link to it)
		}
		err = syscall.Exec(c, append([]string{"coily"}, args...), append(os.Environ(), handedOff+"=1"))
		printLine(stderr, "coily-exec: run %s: %v", c, err)
		return exitRefused
	}
	if why == "" {
		why = "this command line is coily-client's"
	}
	printLine(stderr, "coily-exec: %s, and no coily-client or coily other than this one was found beside %s or on PATH", why, exe)
	return exitRefused
}

// signals returns a context that Ctrl-C or SIGTERM cancels, and which of
// them did (0: none).
func signals() (context.Context, func() int) {
	ctx, cancel := context.WithCancel(context.Background())
	var got atomic.Int32
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, os.Interrupt, syscall.SIGTERM)
	go func() {
		s := <-ch
		if n, ok := s.(syscall.Signal); ok {
			got.Store(int32(n))
		}
		cancel()
	}()
	return ctx, func() int { return int(got.Load()) }
}

// refused prints a call that ended without an exit event, as coily exec
// does (cli.Refusal), and returns its exit code.
func refused(stderr io.Writer, err error) int {
	var r *refusal.Error
	if !errors.As(err, &r) {
		r = refusal.FromStatus(err)
	}
	if client.Unreachable(err) {
		printLine(stderr, "coily: server unreachable: %s", r.Msg)
		return exitUnreachable
	}
	printLine(stderr, "coily: refused (%s): %s", r.Code, r.Msg)
	if r.Code == refusal.CommandTimeout {
		return exitTimeout
	}
	return exitRefused
}

// printLine prints one line of text a server or a command chose, every
// control character escaped (cli.PrintLine).
func printLine(w io.Writer, format string, args ...any) {
	fmt.Fprintln(w, visible.Text(fmt.Sprintf(format, args...)))
}
