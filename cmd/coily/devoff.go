//go:build !coilydev

package main

import (
	"github.com/spf13/cobra"

	"coily.dev/coily/cli"
)

// addDevCommand: `coily dev` is in development builds only (-tags
// coilydev, as scripts/dev.sh builds): its private tailnet is made of
// Tailscale's test components, which production binaries leave out.
func addDevCommand(*cli.App, *cobra.Command) {}

// devDialer: the --dev transport is in development builds only.
func devDialer(*cli.App) {}
