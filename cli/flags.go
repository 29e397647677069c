package cli

import (
	"fmt"
	"strings"

	"coily.dev/coily/client/statedir"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// Every flag has a COILY_* environment twin: the command line wins over
// the environment, the environment over the default, and a twin whose
// value the flag would refuse is a usage error naming the variable (never
// silently ignored: COILY_TAILNET=yes is not false).

// envAnnotation marks a flag with its environment twin.
const envAnnotation = "coily_env"

// Twin gives the flag name of fs the environment twin env, and says so in
// its usage. It returns fs's flag for chaining.
func Twin(fs *pflag.FlagSet, name, env string) *pflag.Flag {
	f := fs.Lookup(name)
	if f == nil {
		panic("cli: no flag " + name)
	}
	if f.Annotations == nil {
		f.Annotations = map[string][]string{}
	}
	f.Annotations[envAnnotation] = []string{env}
	f.Usage = fmt.Sprintf("%s (env %s)", f.Usage, env)
	return f
}

// docDefaultAnnotation is a flag's default as the reference prints it,
// when the value depends on who runs the program.
const docDefaultAnnotation = "coily_doc_default"

// DocDefault sets how the command reference (docs/cli.md) states the
// flag's default, for a default that depends on the user.
func DocDefault(f *pflag.Flag, text string) {
	if f.Annotations == nil {
		f.Annotations = map[string][]string{}
	}
	f.Annotations[docDefaultAnnotation] = []string{text}
}

// EnvOf is the flag's environment twin, "" when it has none.
func EnvOf(f *pflag.Flag) string {
	if v := f.Annotations[envAnnotation]; len(v) == 1 {
		return v[0]
	}
	return ""
}

// prepare runs before every command: it records which global flags the
// command line gave, then fills every flag the command line left alone
// from its environment twin, refusing a value the flag refuses, then
// runs a.Prepared.
func (a *App) prepare(cmd *cobra.Command) error {
	a.g.onCommandLine = map[string]bool{}
	var err error
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if f.Changed {
			a.g.onCommandLine[f.Name] = true
			return
		}
		env := EnvOf(f)
		if env == "" || err != nil {
			return
		}
		v, ok := a.LookupEnv(env)
		if !ok {
			return
		}
		if serr := f.Value.Set(v); serr != nil {
			err = Usagef("%s=%q: not a valid value for --%s: %v", env, v, f.Name, serr)
		}
	})
	for _, p := range a.Prepared {
		if err == nil {
			err = p(cmd)
		}
	}
	return err
}

// globalFlags registers the settings every command accepts.
func (a *App) globalFlags(root *cobra.Command) {
	fs := root.PersistentFlags()
	fs.StringVar(&a.g.StateDir, "state-dir", DefaultStateDir(), "state directory of the server on this host (store, audit log, socket)")
	DocDefault(Twin(fs, "state-dir", "COILY_STATE_DIR"), "/var/lib/coily as root, else $XDG_STATE_HOME/coily or ~/.local/state/coily")
	fs.StringVar(&a.g.Socket, "socket", "", "the server's local operator socket (default <state-dir>/coily.sock)")
	Twin(fs, "socket", "COILY_SOCKET")
	fs.StringVar(&a.g.Server, "server", "", "reach the server over the tailnet at HOST[:PORT] (through this machine's tailscale); several, HOST[:PORT],HOST[:PORT],…, are one trust point, tried in order from the last that answered")
	Twin(fs, "server", "COILY_SERVER")
	fs.StringVar(&a.g.ControlURL, "control-url", "", "coordination server URL for an embedded tailnet node, e.g. a headscale (default: Tailscale's)")
	Twin(fs, "control-url", "COILY_CONTROL_URL")
	fs.StringVar(&a.g.Hostname, "hostname", "", "tailnet host name of this node (serve: the server's, default coily; clients: default coily-client)")
	Twin(fs, "hostname", "COILY_HOSTNAME")
	fs.BoolVarP(&a.g.Verbose, "verbose", "v", false, "say more: transport details, tailnet logs")
	Twin(fs, "verbose", "COILY_VERBOSE")
}

// SocketPath is --socket, or the socket in the state directory.
func (g *Globals) SocketPath() string {
	if g.Socket != "" {
		return g.Socket
	}
	return statedir.Socket(g.StateDir)
}

// ProductionStateDir is `coily serve`'s state directory as root, the one
// the shipped unit uses.
const ProductionStateDir = statedir.Production

// DefaultStateDir is /var/lib/coily for root, else the XDG state home.
func DefaultStateDir() string { return statedir.Default() }

// jsonFlag registers --json (env COILY_JSON) on cmd.
func jsonFlag(cmd *cobra.Command, v *bool, what string) {
	cmd.Flags().BoolVar(v, "json", false, "print "+what+" as JSON")
	Twin(cmd.Flags(), "json", "COILY_JSON")
}

// ArgsAfterDash requires `--` before an argv and nothing else before it:
// `exec [flags] -- ARGV...`.
func ArgsAfterDash(what string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		dash := cmd.ArgsLenAtDash()
		switch {
		case dash < 0 && len(args) > 0:
			return Usagef("put -- before the %s: %s [flags] -- %s", what, cmd.CommandPath(), strings.Join(args, " "))
		case dash < 0 || len(args) == dash:
			return Usagef("no %s: %s [flags] -- ARGV...", what, cmd.CommandPath())
		case dash > 0:
			return Usagef("unexpected %q before --", args[0])
		}
		return nil
	}
}
