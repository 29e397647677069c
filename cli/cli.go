// Package cli is coily's command line: the command tree shared by the full
// coily binary and the lean coily-client (on spf13/cobra), flags with
// COILY_* environment twins that refuse bad values, the exit codes, the
// client commands (exec, lockout, unlock, pause, resume, status,
// approvals, agents-md, shim, git, version) and the safe printing of untrusted
// text (text.go).
//
// Invariants: the package depends on the API, the client transports and
// the refusal codes only, never on the server, the keystores or test
// components, so a client built from it starts in milliseconds; every
// line of untrusted text it prints goes through PrintLine, Argv or JSON;
// a usage error exits 2 before anything is sent.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"coily.dev/coily/client"
)

// App is one run of the command line: its streams, environment and global
// settings, and what the binary adds (commands, transports).
type App struct {
	Name    string // the program's name in messages and usage: "coily"
	Version string // "1.2.0", or "dev" for a build the release did not stamp
	Commit  string // the commit built, "" when unknown (see package version)
	Stdin   io.Reader
	Stdout  io.Writer
	Stderr  io.Writer
	// LookupEnv reads the environment (os.LookupEnv); tests inject theirs.
	LookupEnv func(string) (string, bool)
	// Dialers are transports the binary adds (an embedded tailnet node, a
	// coily dev tailnet), tried in order before the built-in ones; each
	// returns nil, nil when its flags do not ask for it.
	Dialers []Dialer
	// GlobalFlags register global flags the binary adds (its transports').
	GlobalFlags []func(root *cobra.Command)
	// TransportFlags are the global flags the binary adds that name a
	// transport (--tsnet, --dev): given on the command line, they keep
	// exec off the filesystem transport.
	TransportFlags []string
	// Prepared run before every command once its flags are set (the
	// environment twins too): a binary's own settings may change the
	// global ones there.
	Prepared []func(cmd *cobra.Command) error

	g Globals
}

// Dialer connects to the server when the global settings ask for its
// transport, or returns nil, nil.
type Dialer func(ctx context.Context, a *App) (*client.Client, error)

// Globals are the settings every command accepts, before or after its
// name.
type Globals struct {
	StateDir   string
	Socket     string
	Server     string
	ControlURL string
	Hostname   string
	Verbose    bool
	// onCommandLine names the global flags the command line gave (an
	// environment twin alone does not count), for the transport choice.
	onCommandLine map[string]bool
}

// Global returns the global settings, once the command line is parsed.
func (a *App) Global() *Globals { return &a.g }

// GivenOnCommandLine reports whether the command line gave the flag name
// (its environment twin alone does not count).
func (a *App) GivenOnCommandLine(name string) bool { return a.g.onCommandLine[name] }

// Root builds the command tree: the client commands, then those add
// registers (the full binary's server-side commands).
func (a *App) Root(add ...func(root *cobra.Command)) *cobra.Command {
	root := &cobra.Command{
		Use:   a.Name,
		Short: "a remote trust point for AI coding agents",
		Long: a.Name + ` runs privileged commands (gh, git push, aws) for AI coding agents on their owner's behalf:
every call is identified, checked against a default-deny policy, run in a sandbox with the
credentials injected into the command alone, and audited. Commands an agent types go through
` + "`" + a.Name + ` exec -- ARGV...` + "`" + ` or a shim on PATH (` + "`" + a.Name + ` shim install` + "`" + `).`,
		Version:       a.versionLine(),
		SilenceErrors: true,
		SilenceUsage:  true,
		// Typing the program alone prints the help (exit 2: nothing done).
		RunE: func(cmd *cobra.Command, args []string) error {
			cmd.Help()
			return Exit(ExitUsage)
		},
		PersistentPreRunE: func(cmd *cobra.Command, args []string) error { return a.prepare(cmd) },
	}
	root.SetIn(a.Stdin)
	root.SetOut(a.Stdout)
	root.SetErr(a.Stderr)
	root.SetVersionTemplate(a.Name + " {{.Version}}\n")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	root.CompletionOptions.HiddenDefaultCmd = false
	a.globalFlags(root)
	for _, f := range a.GlobalFlags {
		f(root)
	}
	root.AddGroup(&cobra.Group{ID: groupClient, Title: "Commands for agents and owners:"})
	if len(add) > 0 {
		root.AddGroup(&cobra.Group{ID: groupServer, Title: "Commands on the trust point's host:"})
	}
	for _, c := range a.clientCommands() {
		c.GroupID = groupClient
		root.AddCommand(c)
	}
	for _, f := range add {
		f(root)
	}
	root.SetHelpCommandGroupID(groupClient)
	root.SetCompletionCommandGroupID(groupClient)
	return root
}

// Command groups in the help.
const (
	groupClient = "client"
	groupServer = "server"
)

// GroupServer is the help group of the full binary's server-side commands.
const GroupServer = groupServer

func (a *App) clientCommands() []*cobra.Command {
	return []*cobra.Command{a.execCmd(), a.lockoutCmd(), a.unlockCmd(), a.pauseCmd(), a.resumeCmd(),
		a.statusCmd(), a.approvalsCmd(), a.agentsMDCmd(), a.shimCmd(), a.gitCmd(), a.versionCmd()}
}

// Run parses args, runs the command they name and returns the process
// exit code; it prints what went wrong on the way.
func (a *App) Run(ctx context.Context, root *cobra.Command, args []string) int {
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	var x Exit
	var u usageError
	switch {
	case err == nil:
		return ExitOK
	case errors.As(err, &x):
		return int(x)
	case errors.As(err, &u) || isCobraUsage(err):
		lines := strings.Split(strings.TrimRight(err.Error(), "\n"), "\n")
		PrintLine(a.Stderr, "%s: %s", a.Name, lines[0])
		for _, line := range lines[1:] {
			if line = strings.TrimSpace(line); line != "" {
				PrintLine(a.Stderr, "  %s", line)
			}
		}
		if cmd, _, ferr := root.Find(args); ferr == nil && cmd != nil {
			PrintLine(a.Stderr, "Run '%s --help' for usage.", cmd.CommandPath())
		}
		return ExitUsage
	default:
		PrintLine(a.Stderr, "%s: %v", a.Name, err)
		return ExitFailure
	}
}

// usageError is a command line the program cannot run: exit 2.
type usageError struct{ err error }

func (u usageError) Error() string { return u.err.Error() }
func (u usageError) Unwrap() error { return u.err }

// Usagef is a usage error: the command prints it with the way to help,
// and exits 2.
func Usagef(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

// isCobraUsage recognises the errors cobra raises itself for a command
// line it cannot parse.
func isCobraUsage(err error) bool {
	msg := err.Error()
	for _, p := range []string{"unknown command", "unknown flag", "unknown shorthand flag", "invalid argument",
		"flag needs an argument", "accepts ", "requires at least", "requires at most", "required flag"} {
		if strings.HasPrefix(msg, p) || strings.Contains(msg, p) {
			return true
		}
	}
	return false
}

// NewApp is an App on the process's streams and environment.
func NewApp(name, version string) *App {
	return &App{Name: name, Version: version, Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr,
		LookupEnv: os.LookupEnv}
}

// Getenv reads one environment variable ("" when unset).
func (a *App) Getenv(name string) string {
	v, _ := a.LookupEnv(name)
	return v
}
