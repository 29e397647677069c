package client

import (
	"path/filepath"
	"strings"

	"coily.dev/coily/client/sandboxenv"
	"coily.dev/coily/client/statedir"
)

// Route is the transport that reaches the server.
type Route string

// The routes, in the order Where picks them.
const (
	RouteFolder Route = "folder" // a network-less sandbox's shared folder (exec only)
	RouteDev    Route = "dev"    // a `coily dev` tailnet (the development build)
	RouteTsnet  Route = "tsnet"  // --server through a tailnet node of the process's own
	RouteServer Route = "server" // --server through this machine's tailscale
	RouteSocket Route = "socket" // the local operator socket
)

// Settings are where the server is, as the command line and the
// environment (COILY_*) say it: every client reads them (WhereFromEnv for
// one that has no flags).
type Settings struct {
	Socket   string // COILY_SOCKET: the local socket ("": in StateDir)
	StateDir string // COILY_STATE_DIR ("": statedir.Default)
	Server   string // COILY_SERVER: HOST[:PORT] on the tailnet, or several separated by commas (Servers)
	Tsnet    bool   // COILY_TSNET: reach Server with a node of this process's own
	Dev      string // COILY_DEV: the state directory of a `coily dev`
	// Named is set when the command line named a transport (--socket,
	// --server, --tsnet, --dev): then exec does not take the shared
	// folder, whatever the sandbox detection says.
	Named bool
	// SocketNamed is set when the command line gave --socket: it wins
	// over every other setting.
	SocketNamed bool
	// Sandbox is set when this process runs in a network-less sandbox
	// (sandboxenv.Detect).
	Sandbox bool
}

// Where is the route to the server for a call: exec says whether the
// call is an exec (only an exec goes through the shared folder).
func (s Settings) Where(exec bool) Route {
	switch {
	case exec && s.Sandbox && !s.Named:
		return RouteFolder
	case s.SocketNamed:
		return RouteSocket
	case s.Dev != "":
		return RouteDev
	case s.Tsnet:
		return RouteTsnet
	case s.Server != "":
		return RouteServer
	}
	return RouteSocket
}

// Servers is each server Server lists, in order (nil when it lists
// none).
func (s Settings) Servers() []string {
	if s.Server == "" {
		return nil
	}
	return strings.Split(s.Server, ",")
}

// SocketPath is the local socket: Socket, or the socket in StateDir.
func (s Settings) SocketPath() string {
	if s.Socket != "" {
		return s.Socket
	}
	dir := s.StateDir
	if dir == "" {
		dir = statedir.Default()
	}
	return statedir.Socket(dir)
}

// GitSocketPath is the git proxy's local socket: git.sock beside
// SocketPath (statedir.GitSocket).
func (s Settings) GitSocketPath() string {
	return statedir.GitSocket(filepath.Dir(s.SocketPath()))
}

// WhereEnv is every environment variable Settings come from.
var WhereEnv = []string{"COILY_SOCKET", "COILY_STATE_DIR", "COILY_SERVER", "COILY_TSNET", "COILY_DEV"}

// SettingsFromEnv reads Settings from the environment alone, for a client
// without flags (coily-exec and the shims). COILY_TSNET counts as set
// unless it says false as its flag reads it: a value the flag would
// refuse is not taken for false.
func SettingsFromEnv(getenv func(string) string) Settings {
	tsnet := false
	switch getenv("COILY_TSNET") {
	case "", "0", "f", "F", "false", "FALSE", "False":
	default:
		tsnet = true
	}
	return Settings{Socket: getenv("COILY_SOCKET"), StateDir: getenv("COILY_STATE_DIR"), Server: getenv("COILY_SERVER"),
		Tsnet: tsnet, Dev: getenv("COILY_DEV"), Sandbox: sandboxenv.Detect(getenv)}
}

// ExecEnv is every setting beyond where the server is (WhereEnv) that
// changes what `coily exec` does beyond the plain call coily-exec makes:
// when one is set, coily-exec hands the command to coily exec. A test in
// cmd/coily checks that every COILY_* twin of exec's flags and of the
// global flags is here or in WhereEnv, so a new one cannot be ignored in
// silence.
var ExecEnv = []string{
	// Other transports' details.
	"COILY_TSNET_STATE", "COILY_CONTROL_URL", "COILY_HOSTNAME", "COILY_DEV_AS",
	"COILY_MOUNT", "COILY_KEY_FILE", "COILY_VERBOSE",
	// exec's flags.
	"COILY_TIMEOUT", "COILY_STDIN", "COILY_NOTE", "COILY_CWD", "COILY_EXEC_ENV", "COILY_JSON",
}
