package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Every flag has a COILY_* environment twin; the flag wins over the
// environment, the environment over the default.

func stringFlag(fs *flag.FlagSet, name, envName, def, usage string) *string {
	if v, ok := os.LookupEnv(envName); ok {
		def = v
	}
	return fs.String(name, def, fmt.Sprintf("%s (env %s)", usage, envName))
}

func boolFlag(fs *flag.FlagSet, name, envName string, usage string) *bool {
	def := false
	if v, ok := os.LookupEnv(envName); ok {
		def, _ = strconv.ParseBool(v)
	}
	return fs.Bool(name, def, fmt.Sprintf("%s (env %s)", usage, envName))
}

func durationFlag(fs *flag.FlagSet, name, envName string, def time.Duration, usage string) *time.Duration {
	if v, ok := os.LookupEnv(envName); ok {
		if d, err := time.ParseDuration(v); err == nil {
			def = d
		}
	}
	return fs.Duration(name, def, fmt.Sprintf("%s (env %s)", usage, envName))
}

func intFlag(fs *flag.FlagSet, name, envName string, def int, usage string) *int {
	if v, ok := os.LookupEnv(envName); ok {
		if n, err := strconv.Atoi(v); err == nil {
			def = n
		}
	}
	return fs.Int(name, def, fmt.Sprintf("%s (env %s)", usage, envName))
}

// globalFlags are accepted before the subcommand and after it.
type globalFlags struct {
	// socketGiven is set when --socket was given on the command line: a
	// transport named there wins over one from the environment.
	socketGiven bool
	// stateDirGiven is set when --state-dir or COILY_STATE_DIR set the
	// state directory: `coily dev` picks its own default otherwise.
	stateDirGiven bool

	stateDir   *string
	socket     *string
	server     *string
	tsnet      *bool
	controlURL *string
	dev        *string
	devAs      *string
}

func registerGlobalFlags(fs *flag.FlagSet) *globalFlags {
	g := &globalFlags{
		stateDir:   stringFlag(fs, "state-dir", "COILY_STATE_DIR", defaultStateDir(), "state directory (store, audit log, socket)"),
		socket:     stringFlag(fs, "socket", "COILY_SOCKET", "", "local operator socket (default <state-dir>/coily.sock)"),
		server:     stringFlag(fs, "server", "COILY_SERVER", "", "reach the server over the tailnet at HOST[:PORT]"),
		tsnet:      boolFlag(fs, "tsnet", "COILY_TSNET", "join the tailnet as an ephemeral node (auth key in TS_AUTHKEY) instead of using the OS's tailscale"),
		controlURL: stringFlag(fs, "control-url", "COILY_CONTROL_URL", "", "coordination server URL for --tailnet and --tsnet, e.g. a headscale (default: Tailscale's)"),
		dev:        stringFlag(fs, "dev", "COILY_DEV", "", "reach the `coily dev` running with this state dir, over its tailnet"),
		devAs:      stringFlag(fs, "dev-as", "COILY_DEV_AS", "owner", "with --dev: the tag to present (owner, agent, stranger)"),
	}
	_, g.stateDirGiven = os.LookupEnv("COILY_STATE_DIR")
	return g
}

// addTo registers the global flags on a subcommand's flag set, bound to the
// same variables, keeping values already set.
func (g *globalFlags) addTo(fs *flag.FlagSet) {
	fs.StringVar(g.stateDir, "state-dir", *g.stateDir, "state directory (env COILY_STATE_DIR)")
	fs.StringVar(g.socket, "socket", *g.socket, "local operator socket (env COILY_SOCKET)")
	fs.StringVar(g.server, "server", *g.server, "server on the tailnet, HOST[:PORT] (env COILY_SERVER)")
	fs.BoolVar(g.tsnet, "tsnet", *g.tsnet, "join the tailnet as an ephemeral node (env COILY_TSNET)")
	fs.StringVar(g.controlURL, "control-url", *g.controlURL, "coordination server URL (env COILY_CONTROL_URL)")
	fs.StringVar(g.dev, "dev", *g.dev, "coily dev state dir to reach (env COILY_DEV)")
	fs.StringVar(g.devAs, "dev-as", *g.devAs, "tag to present on the dev tailnet (env COILY_DEV_AS)")
}

// socketPath is the socket flag, or the default inside the state dir.
func (g *globalFlags) socketPath() string {
	if *g.socket != "" {
		return *g.socket
	}
	return filepath.Join(*g.stateDir, "coily.sock")
}

// productionStateDir is `coily serve`'s state directory as root, the one
// the shipped unit uses.
const productionStateDir = "/var/lib/coily"

// defaultStateDir is /var/lib/coily for root, else the XDG state home.
func defaultStateDir() string {
	if os.Geteuid() == 0 {
		return productionStateDir
	}
	if d := os.Getenv("XDG_STATE_HOME"); d != "" {
		return filepath.Join(d, "coily")
	}
	if h, err := os.UserHomeDir(); err == nil {
		return filepath.Join(h, ".local", "state", "coily")
	}
	return "coily-state"
}

// parseFlags parses a subcommand's flags, printing errors to stderr. It
// returns false (and the exit code) when the command should stop.
func parseFlags(fs *flag.FlagSet, e *env) (int, bool) {
	fs.SetOutput(e.stderr)
	e.global.addTo(fs)
	if err := fs.Parse(e.args); err != nil {
		if err == flag.ErrHelp {
			return 0, false
		}
		return 2, false
	}
	e.global.noteGiven(fs)
	return 0, true
}

// noteGiven records which global flags the command line set.
func (g *globalFlags) noteGiven(fs *flag.FlagSet) {
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "socket":
			g.socketGiven = true
		case "state-dir":
			g.stateDirGiven = true
		}
	})
}

// repeatedFlag is a flag given any number of times. Its environment twin
// holds a comma-separated list, replaced (not extended) by the command
// line.
type repeatedFlag struct {
	specs   []string
	fromEnv bool
}

func listFlag(fs *flag.FlagSet, name, envName, usage string) *repeatedFlag {
	f := &repeatedFlag{}
	if v, ok := os.LookupEnv(envName); ok {
		for _, s := range strings.Split(v, ",") {
			if s = strings.TrimSpace(s); s != "" {
				f.specs = append(f.specs, s)
			}
		}
		f.fromEnv = true
	}
	fs.Var(f, name, fmt.Sprintf("%s (env %s)", usage, envName))
	return f
}

func (f *repeatedFlag) String() string {
	if f == nil {
		return ""
	}
	return strings.Join(f.specs, ",")
}

func (f *repeatedFlag) Set(v string) error {
	if f.fromEnv {
		f.specs, f.fromEnv = nil, false
	}
	f.specs = append(f.specs, v)
	return nil
}

var _ flag.Value = (*repeatedFlag)(nil)
