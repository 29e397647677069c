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
				return writeJSON(a.Stdout, map[string]string{"name": a.Name, "version": a.Version, "commit": a.Commit,
					"go": runtime.Version(), "os": runtime.GOOS, "arch": runtime.GOARCH})
			}
			PrintLine(a.Stdout, "%s %s", a.Name, a.versionLine())
			return nil
		},
	}
	jsonFlag(cmd, &asJSON, "the version, commit, Go version and platform")
	return cmd
}

// versionLine is what `version` and --version print after the name:
// "1.2.0 (commit HASH)", or the version alone when the commit is unknown.
func (a *App) versionLine() string {
	if a.Commit == "" {
		return a.Version
	}
	return a.Version + " (commit " + a.Commit + ")"
}
