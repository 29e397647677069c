//go:build coilydev

package main

import (
	"bytes"
	"flag"
	"os"
	"testing"

	"github.com/spf13/cobra"

	"coily.dev/coily/cli"
)

var updateReference = flag.Bool("update", false, "rewrite docs/cli.md from the command tree")

// docs/cli.md is generated from the command tree of the development build
// (every command, coily dev included): it cannot drift from what the
// program accepts. `go test -tags coilydev ./cmd/coily -run TestCLIReference
// -update` rewrites it.
func TestCLIReference(t *testing.T) {
	a := cli.NewApp("coily", "dev")
	t.Setenv("HOME", "/home/user") // per-user defaults print the same everywhere
	t.Setenv("XDG_STATE_HOME", "")
	t.Setenv("XDG_DATA_HOME", "")
	tsnetDialer(a)
	devDialer(a)
	root := a.Root(func(root *cobra.Command) { addCommands(a, root) })
	var b bytes.Buffer
	if err := cli.WriteReference(&b, root); err != nil {
		t.Fatal(err)
	}
	const path = "../../docs/cli.md"
	if *updateReference {
		if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if !bytes.Equal(want, b.Bytes()) {
		t.Fatalf("docs/cli.md is stale: run go test -tags coilydev ./cmd/coily -run TestCLIReference -update")
	}
}
