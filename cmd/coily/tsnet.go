package main

import (
	"context"
	"io"
	"log"
	"os"

	"github.com/spf13/cobra"

	"coily.dev/coily/cli"
	"coily.dev/coily/client"
	"coily.dev/coily/client/tsnode"
)

// tsnetSettings are the global flags of the embedded tailnet client.
type tsnetSettings struct {
	on       bool
	stateDir string
}

// tsnetDialer adds --tsnet: join the tailnet with a node of this process's
// own (for machines without tailscaled), whose state persists so that later
// commands reuse it.
func tsnetDialer(a *cli.App) {
	var s tsnetSettings
	a.TransportFlags = append(a.TransportFlags, "tsnet")
	a.Dialers = append(a.Dialers, func(ctx context.Context, a *cli.App) (*client.Client, error) {
		if !s.on {
			return nil, nil
		}
		g := a.Global()
		if g.Server == "" {
			return nil, cli.Usagef("--tsnet needs --server HOST[:PORT] (or COILY_SERVER)")
		}
		if err := cli.CheckServers(g.Server); err != nil {
			return nil, err
		}
		o := tsnode.Options{Server: g.Server, AuthKey: os.Getenv("TS_AUTHKEY"), ControlURL: g.ControlURL,
			Hostname: g.Hostname, StateDir: s.stateDir}
		if g.Verbose {
			o.Logf = log.New(a.Stderr, "tsnet: ", log.LstdFlags|log.Lmicroseconds).Printf
		} else {
			// Parts of the tailnet stack write to the standard logger
			// (TLS warnings about the control server's certificate): this
			// process is a command, whose stderr is the user's.
			log.SetOutput(io.Discard)
		}
		return tsnode.Dial(ctx, o)
	})
	a.GlobalFlags = append(a.GlobalFlags, func(root *cobra.Command) {
		fs := root.PersistentFlags()
		fs.BoolVar(&s.on, "tsnet", false, "reach --server by joining the tailnet with a node of this process's own (no tailscaled needed; auth key in TS_AUTHKEY the first time; the node's state persists)")
		cli.Twin(fs, "tsnet", "COILY_TSNET")
		fs.StringVar(&s.stateDir, "tsnet-state", tsnode.DefaultStateDir(), "where --tsnet nodes keep their state")
		cli.DocDefault(cli.Twin(fs, "tsnet-state", "COILY_TSNET_STATE"), "$XDG_STATE_HOME/coily/tsnet or ~/.local/state/coily/tsnet")
	})
}
