// Command coily-exec runs one command on the coily trust point, as
// `coily exec -- COMMAND ARG...` does, in a process that does next to
// nothing else: it speaks the one call to the local socket itself
// (client/fastexec) and links neither gRPC, the protobuf runtime, net/http
// nor the command line of coily, so that an agent's every `gh` or `git`
// costs little more than the command on the trust point
// (docs/benchmarks.md).
//
//	coily-exec [--] COMMAND [ARG...]
//
// Named after a command (a link gh -> coily-exec, as `coily shim install`
// makes where coily-exec sits beside coily), it runs that command with all
// its arguments: `gh issue list` is `coily exec -- gh issue list`. Named
// coily (a link beside coily-client), it runs `coily exec -- ARGV...`
// itself and hands every other command line to coily-client unchanged.
//
// It takes no flags. Standard input is sent as `--stdin=auto` sends it,
// output streams back, and the exit code is the command's, or 124 (out of
// time), 125 (refused: "coily: refused (CODE): message" on stderr), 69
// (the server cannot be reached), 128+N (interrupted by signal N). Any
// other case — a sandbox's shared folder, a tailnet server, a COILY_*
// setting of coily exec's (fastexec.HandOffEnv) — is handed to
// `coily exec` (coily-client or coily beside this binary, else coily on
// PATH), which replaces this process.
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

	"coily.dev/coily/client/fastexec"
	"coily.dev/coily/client/sandboxenv"
	"coily.dev/coily/client/statedir"
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

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

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
		return handOff(args[1:], "", stderr) // coily status, coily exec --timeout …: coily-client's
	}
	if argv == nil {
		return code
	}
	if why := handOffReason(getenv); why != "" {
		return handOff(append([]string{"exec", "--"}, argv...), why, stderr)
	}
	socket := getenv("COILY_SOCKET")
	if socket == "" {
		dir := getenv("COILY_STATE_DIR")
		if dir == "" {
			dir = statedir.Default()
		}
		socket = statedir.Socket(dir)
	}
	req := fastexec.Request{Argv: argv}
	switch fastexec.LookAtStdin(stdin) {
	case fastexec.StdinReady:
		data, err := io.ReadAll(io.LimitReader(stdin, maxStdin+1))
		if err != nil || len(data) > maxStdin {
			printLine(stderr, "coily: stdin: more than %d bytes or unreadable", maxStdin)
			return exitRefused
		}
		req.Stdin = data
	case fastexec.StdinIdle:
		printLine(stderr, "coily: standard input not sent: nothing to read on it within %v (COILY_STDIN=true sends it anyway, COILY_STDIN=false silences this)", fastexec.StdinWait)
	}
	ctx, interrupted := signals()
	call := fastexec.Call{Socket: socket, Stdout: stdout, Stderr: stderr, OnApproval: func(ap fastexec.Approval) {
		printLine(stderr, "coily: rule %q needs approval %s (expires %s); an approver runs: coily approvals approve %s",
			ap.Rule, ap.ID, ap.ExpiresAt.Local().Format(time.Kitchen), ap.ID)
	}}
	exit, err := call.Run(ctx, req)
	if sig := interrupted(); err != nil && sig != 0 {
		return 128 + sig
	}
	if err != nil {
		return refused(stderr, err)
	}
	for _, s := range exit.EgressDenied {
		printLine(stderr, "coily: egress refused: %s", s)
	}
	for _, s := range exit.SSHAgentRefused {
		printLine(stderr, "coily: %s", s)
	}
	if exit.Signal > 0 {
		return 128 + int(exit.Signal)
	}
	return int(exit.Code)
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
		fmt.Fprintln(stdout, self, version)
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
// call: a sandbox (the shared folder's transport) or a setting this
// client does not read (fastexec.HandOffEnv). "" for the plain case.
func handOffReason(getenv func(string) string) string {
	if sandboxenv.Detect(getenv) {
		return "in a sandbox"
	}
	for _, name := range fastexec.HandOffEnv {
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
func handOff(args []string, why string, stderr io.Writer) int {
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
	var st *fastexec.StatusError
	if !errors.As(err, &st) {
		printLine(stderr, "coily: refused (internal): %s", err.Error())
		return exitRefused
	}
	if st.Unreachable() {
		printLine(stderr, "coily: server unreachable: %s", st.Message)
		return exitUnreachable
	}
	printLine(stderr, "coily: refused (%s): %s", st.Refusal(), st.Message)
	if st.Refusal() == "command-timeout" {
		return exitTimeout
	}
	return exitRefused
}

// printLine prints one line of text a server or a command chose, every
// control character escaped (cli.PrintLine).
func printLine(w io.Writer, format string, args ...any) {
	fmt.Fprintln(w, visible.Text(fmt.Sprintf(format, args...)))
}
