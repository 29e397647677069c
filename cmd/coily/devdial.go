//go:build coilydev

package main

import (
	"context"
	"errors"

	"github.com/spf13/cobra"

	"coily.dev/coily/cli"
	"coily.dev/coily/client"
	"coily.dev/coily/client/tsnode"
)

// devDialer adds --dev DIR and --dev-as TAG: reach the `coily dev`
// running with that state directory over its private tailnet, presenting
// tag:TAG (owner, agent, stranger).
func devDialer(a *cli.App) {
	var dir, as string
	a.TransportFlags = append(a.TransportFlags, "dev")
	a.Dialers = append([]cli.Dialer{func(ctx context.Context, a *cli.App) (*client.Client, error) {
		if dir == "" {
			return nil, nil
		}
		return tsnode.DialDev(ctx, dir, as)
	}}, a.Dialers...)
	a.GlobalFlags = append(a.GlobalFlags, func(root *cobra.Command) {
		fs := root.PersistentFlags()
		fs.StringVar(&dir, "dev", "", "reach the `coily dev` running with this state dir, over its tailnet; the commands that read a state dir on this host read it, unless --state-dir names another")
		cli.Twin(fs, "dev", "COILY_DEV")
		as = "owner"
		fs.Var(devAs{&as}, "dev-as", "with --dev: the tag to present: owner, agent or stranger")
		cli.Twin(fs, "dev-as", "COILY_DEV_AS")
	})
	a.Prepared = append(a.Prepared, func(cmd *cobra.Command) error {
		devStateDirDefault(a, cmd, dir)
		return nil
	})
}

// devStateDirDefault makes the dev state directory (--dev, COILY_DEV) the
// state directory of the commands that read one on this host (audit,
// state, key…) when neither --state-dir nor COILY_STATE_DIR names
// another: `coily audit tail` after `. DIR/env` reads coily dev's log.
// `coily serve` and `coily dev` choose their own.
func devStateDirDefault(a *cli.App, cmd *cobra.Command, dir string) {
	if dir == "" || a.GivenOnCommandLine("state-dir") {
		return
	}
	if _, ok := a.LookupEnv("COILY_STATE_DIR"); ok {
		return
	}
	for c := cmd; c != nil; c = c.Parent() {
		if c.HasParent() && !c.Parent().HasParent() && (c.Name() == "serve" || c.Name() == "dev") {
			return
		}
	}
	a.Global().StateDir = dir
}

// devAs is --dev-as: one of the dev policy's tags.
type devAs struct{ v *string }

func (d devAs) String() string {
	if d.v == nil {
		return ""
	}
	return *d.v
}

func (d devAs) Set(s string) error {
	if s != "owner" && s != "agent" && s != "stranger" {
		return errBadDevAs
	}
	*d.v = s
	return nil
}

func (d devAs) Type() string { return "tag" }

var errBadDevAs = errors.New("want owner, agent or stranger")
