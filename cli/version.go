package cli

import (
	"runtime"

	"github.com/spf13/cobra"
)

func (a *App) versionCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "version",
		Short: "print the version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if asJSON {
				return writeJSON(a.Stdout, map[string]string{"name": a.Name, "version": a.Version,
					"go": runtime.Version(), "os": runtime.GOOS, "arch": runtime.GOARCH})
			}
			PrintLine(a.Stdout, "%s %s", a.Name, a.Version)
			return nil
		},
	}
	jsonFlag(cmd, &asJSON, "the version, Go version and platform")
	return cmd
}
