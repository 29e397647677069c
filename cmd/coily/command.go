package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"coily.dev/coily/cli"
	"coily.dev/coily/client"
)

// env is what a subcommand runs with: its arguments after the flags, the
// global settings and the standard streams.
type env struct {
	args   []string
	global *cli.Globals
	app    *cli.App
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
}

// runFunc runs a subcommand and returns its exit code.
type runFunc func(ctx context.Context, e *env) int

// spec describes one server-side subcommand.
type spec struct {
	use, short, long, example string
	args                      cobra.PositionalArgs
	hidden                    bool
	// flags registers the command's flags and returns what runs it.
	flags func(fs *pflag.FlagSet) runFunc
}

// command builds a cobra command from s, in the server group.
func command(a *cli.App, s spec) *cobra.Command {
	cmd := &cobra.Command{Use: s.use, Short: s.short, Long: s.long, Example: s.example, Args: s.args, Hidden: s.hidden}
	if cmd.Args == nil {
		cmd.Args = cobra.NoArgs
	}
	if !s.hidden {
		cmd.GroupID = cli.GroupServer
	}
	run := s.flags(cmd.Flags())
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if d := cmd.ArgsLenAtDash(); d >= 0 {
			args = args[d:]
		}
		code := run(cmd.Context(), &env{args: args, global: a.Global(), app: a,
			stdin: a.Stdin, stdout: a.Stdout, stderr: a.Stderr})
		if code == 0 {
			return nil
		}
		return cli.Exit(code)
	}
	return cmd
}

// group builds a command that only holds subcommands.
func group(use, short, long string, subs ...*cobra.Command) *cobra.Command {
	cmd := &cobra.Command{Use: use, Short: short, Long: long, GroupID: cli.GroupServer, Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { cmd.Help(); return cli.Exit(cli.ExitUsage) }}
	for _, s := range subs {
		s.GroupID = ""
		cmd.AddCommand(s)
	}
	return cmd
}

// Every flag has a COILY_* environment twin (cli.Twin): the command line
// wins over the environment, the environment over the default, and a bad
// value in the environment is a usage error.

func stringFlag(fs *pflag.FlagSet, name, envName, def, usage string) *string {
	v := fs.String(name, def, usage)
	cli.Twin(fs, name, envName)
	return v
}

func boolFlag(fs *pflag.FlagSet, name, envName string, usage string) *bool {
	v := fs.Bool(name, false, usage)
	cli.Twin(fs, name, envName)
	return v
}

func durationFlag(fs *pflag.FlagSet, name, envName string, def time.Duration, usage string) *time.Duration {
	v := fs.Duration(name, def, usage)
	cli.Twin(fs, name, envName)
	return v
}

func intFlag(fs *pflag.FlagSet, name, envName string, def int, usage string) *int {
	v := fs.Int(name, def, usage)
	cli.Twin(fs, name, envName)
	return v
}

// repeatedFlag is a flag given any number of times. Its environment twin
// holds a comma-separated list, replaced (not extended) by the command
// line.
type repeatedFlag struct {
	specs []string
	set   bool
}

func listFlag(fs *pflag.FlagSet, name, envName, usage string) *repeatedFlag {
	f := &repeatedFlag{}
	fs.Var(f, name, usage)
	cli.Twin(fs, name, envName)
	return f
}

func (f *repeatedFlag) String() string {
	if f == nil {
		return ""
	}
	return strings.Join(f.specs, ",")
}

// Set adds one value; from the environment, a comma-separated list.
func (f *repeatedFlag) Set(v string) error {
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			f.specs = append(f.specs, s)
		}
	}
	f.set = true
	return nil
}

func (f *repeatedFlag) Type() string { return "strings" }

var _ pflag.Value = (*repeatedFlag)(nil)

// usage prints a usage error for the command and returns exit code 2.
func usage(e *env, format string, args ...any) int {
	printLine(e.stderr, "coily: %s", fmt.Sprintf(format, args...))
	return cli.ExitUsage
}

// printLine, termArgv and termJSON print untrusted text safely (cli).
func printLine(w io.Writer, format string, args ...any) { cli.PrintLine(w, format, args...) }
func termArgv(argv []string) string                     { return cli.Argv(argv) }
func termJSON(j []byte) []byte                          { return cli.JSON(j) }
func termText(s string) string                          { return cli.Text(s) }
func orNone(v []string) string                          { return cli.OrNone(v) }

// withClient dials the server the global settings name, runs call, and
// turns a failure into the CLI's refusal output and exit code.
func withClient(ctx context.Context, e *env, call func(*client.Client) error) int {
	c, err := e.app.Dial(ctx)
	if err != nil {
		return cli.Refusal(e.stderr, err, false)
	}
	defer c.Close()
	if err := call(c); err != nil {
		return cli.Refusal(e.stderr, err, false)
	}
	return 0
}

// shellQuote quotes s for sh, in single quotes.
func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
