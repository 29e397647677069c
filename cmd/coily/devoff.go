//go:build !coilydev

package main

import (
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"coily.dev/coily/cli"
)

// addDevCommand: `coily dev` is in development builds only (-tags
// coilydev, as scripts/dev.sh builds): its private tailnet is made of
// Tailscale's test components, which production binaries leave out.
func addDevCommand(*cli.App, *cobra.Command) {}

// devDialer: the --dev transport is in development builds only.
func devDialer(*cli.App) {}

// devServeFlags: coily serve's hidden development flags (the audit log's
// rotation size) are in development builds only; here the default.
func devServeFlags(*pflag.FlagSet) func() (int64, error) {
	return func() (int64, error) { return 0, nil }
}
