//go:build coilydev

package main

import (
	"slices"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"coily.dev/coily/cli"
	"coily.dev/coily/client"
)

// TestCoilyExecKnowsEveryExecSetting: every COILY_* twin that can change
// what `coily exec` does (its flags and the global ones, in the full
// development build) is one coily-exec reads or one it hands to coily
// exec: a new flag cannot be ignored by the shims in silence.
func TestCoilyExecKnowsEveryExecSetting(t *testing.T) {
	a := cli.NewApp("coily", "dev")
	tsnetDialer(a)
	devDialer(a)
	root := a.Root(func(root *cobra.Command) { addCommands(a, root) })
	execCmd, _, err := root.Find([]string{"exec"})
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	check := func(f *pflag.Flag) {
		for _, env := range f.Annotations["coily_env"] {
			seen++
			if !slices.Contains(client.ExecEnv, env) && !slices.Contains(client.WhereEnv, env) {
				t.Errorf("--%s's twin %s is neither read by the resolver nor handed by coily-exec to coily exec (client/where.go)", f.Name, env)
			}
		}
	}
	execCmd.LocalFlags().VisitAll(check)
	execCmd.InheritedFlags().VisitAll(check)
	if seen < 10 {
		t.Fatalf("only %d twins found: is the annotation still coily_env?", seen)
	}
}
