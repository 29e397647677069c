package cli

import (
	"context"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"

	"coily.dev/coily/client"
	"coily.dev/coily/client/folder"
	"coily.dev/coily/client/tailnet"
)

// Dial connects to the server the settings name (client.Settings.Where,
// the resolver every client uses): the local socket when --socket is on
// the command line; a transport the binary adds (Dialers: an embedded
// tailnet node, a coily dev tailnet); --server through this machine's
// tailscale; the local socket. A route the environment names that this
// binary has no transport for (COILY_DEV in a build without coily dev,
// COILY_TSNET in the lean client) is refused, never taken for the local
// socket.
func (a *App) Dial(ctx context.Context) (*client.Client, error) {
	s := a.Settings()
	if s.SocketNamed {
		return client.DialLocal(s.SocketPath())
	}
	for _, d := range a.Dialers {
		c, err := d(ctx, a)
		if c != nil || err != nil {
			return c, err
		}
	}
	switch route := s.Where(false); route {
	case client.RouteDev, client.RouteTsnet:
		return nil, Usagef("%s is set, but this %s has no %s transport (the development build, go build -tags coilydev ./cmd/coily, has every one)",
			map[client.Route]string{client.RouteDev: "COILY_DEV", client.RouteTsnet: "COILY_TSNET"}[route], a.Name, route)
	case client.RouteServer:
		if err := CheckServers(s.Server); err != nil {
			return nil, err
		}
		return tailnet.DialServer(ctx, s.Servers()...)
	}
	return client.DialLocal(s.SocketPath())
}

// Settings are where the server is, from the global flags and the
// environment; a transport the binary adds reads its own flags.
func (a *App) Settings() client.Settings {
	env := client.SettingsFromEnv(a.Getenv)
	s := client.Settings{Socket: a.g.Socket, StateDir: a.g.StateDir, Server: a.g.Server, Tsnet: env.Tsnet, Dev: env.Dev,
		SocketNamed: a.GivenOnCommandLine("socket"), Sandbox: env.Sandbox}
	for _, f := range append([]string{"socket", "server"}, a.TransportFlags...) {
		s.Named = s.Named || a.GivenOnCommandLine(f)
	}
	return s
}

// CheckServer refuses a --server value no transport could dial, as a
// usage error (exit 2, not 69: no server was tried): HOST or HOST:PORT
// (an IPv6 address in brackets when it has a port), the host not empty
// and free of spaces, slashes and control characters, the port a number
// from 1 to 65535.
func CheckServer(server string) error {
	if name, ok := strings.CutPrefix(server, "svc:"); ok { // a Tailscale Service, svc:NAME[:PORT]
		if name == "" || strings.HasPrefix(name, ":") {
			return Usagef("--server %q: want svc:NAME[:PORT]", server)
		}
		server = name
	}
	host, port, err := net.SplitHostPort(server)
	hasPort := err == nil
	if !hasPort {
		host = server // HOST alone (an IPv6 address too): the default port
	}
	if host == "" || strings.ContainsFunc(host, func(r rune) bool { return r <= ' ' || r == '/' || r == 0x7f }) {
		return Usagef("--server %q: want HOST[:PORT]", server)
	}
	if hasPort {
		if p, err := strconv.ParseUint(port, 10, 16); err != nil || p == 0 {
			return Usagef("--server %q: bad port %q: want a number from 1 to 65535", server, port)
		}
	}
	return nil
}

// MaxServers bounds the servers --server lists.
const MaxServers = 16

// CheckServers refuses a --server list no transport could dial, as a
// usage error: one to MaxServers entries separated by commas, each one
// CheckServer takes, none named twice.
func CheckServers(list string) error {
	entries := strings.Split(list, ",")
	if len(entries) > MaxServers {
		return Usagef("--server: %d servers; at most %d", len(entries), MaxServers)
	}
	for k, e := range entries {
		if len(entries) > 1 && e == "" {
			return Usagef("--server %q: an empty entry; want HOST[:PORT],HOST[:PORT],…", list)
		}
		if err := CheckServer(e); err != nil {
			return err
		}
		if slices.Contains(entries[:k], e) {
			return Usagef("--server %q: %q twice", list, e)
		}
	}
	return nil
}

// withClient dials, runs call, and turns a failure into the CLI's refusal
// output and exit code.
func (a *App) withClient(ctx context.Context, asJSON bool, call func(*client.Client) error) error {
	c, err := a.Dial(ctx)
	if err != nil {
		return Exit(Refusal(a.Stderr, err, asJSON))
	}
	defer c.Close()
	if err := call(c); err != nil {
		return Exit(Refusal(a.Stderr, err, asJSON))
	}
	return nil
}

// inSandbox reports whether exec should use the filesystem transport: this
// process runs in a network-less sandbox (folder.DetectSandbox) and the
// command line names no transport.
func (a *App) inSandbox() bool { return a.Settings().Where(true) == client.RouteFolder }

// sandboxClient is the filesystem transport: the shared folder from
// COILY_MOUNT or the working directory up, the key from COILY_KEY_FILE or
// ~/.coily/key.
func (a *App) sandboxClient() (*folder.Client, error) {
	cwd, err := os.Getwd()
	if err != nil {
		return nil, err
	}
	mount, err := folder.FindMount(a.Getenv, cwd)
	if err != nil {
		return nil, err
	}
	path, err := folder.KeyPath(a.Getenv)
	if err != nil {
		return nil, err
	}
	key, err := folder.ReadKeyFile(path)
	if err != nil {
		return nil, err
	}
	return &folder.Client{Mount: mount, Key: key}, nil
}
