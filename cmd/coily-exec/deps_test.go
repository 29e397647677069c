package main

import (
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// coily-exec links the one call and nothing heavy: coily's client stack
// (connect-go over net/http), but no grpc-go, command-line library,
// embedded tailnet node, server, filesystem transport or descriptor
// parser (with its YAML readers), on every system it ships for. That is
// its whole point (docs/benchmarks.md): TestCoilyExecSameAsCoilyExec
// checks it still does the job.
func TestCoilyExecLinksNextToNothing(t *testing.T) {
	forbidden := []string{"google.golang.org/grpc/internal/transport", "google.golang.org/grpc/balancer",
		"google.golang.org/grpc/resolver", "github.com/spf13/cobra", "coily.dev/coily/client/tsnode", "coily.dev/coily/cli",
		"coily.dev/coily/server", "tailscale.com/tsnet", "tailscale.com/wgengine", "tailscale.com/client/local", "testing",
		"coily.dev/coily/client/folder", "go.yaml.in/yaml/v3", "github.com/goccy/go-yaml", "coily.dev/coily/yamlpos",
		"coily.dev/coily/yamlguard", "github.com/fsnotify/fsnotify"}
	// Themselves, not their subpackages: grpc-go's status and codes (which
	// link no transport) read the server's refusals; descriptor/layout is
	// the shared folder's shape alone (the bound on a relayed answer).
	exact := []string{"google.golang.org/grpc", "golang.org/x/net/http2", "coily.dev/coily/descriptor"}
	for _, target := range []struct{ goos, goarch string }{{"linux", "amd64"}, {"linux", "arm64"}, {"darwin", "arm64"}} {
		cmd := exec.Command("go", "list", "-deps", ".")
		cmd.Env = append(os.Environ(), "GOOS="+target.goos, "GOARCH="+target.goarch, "CGO_ENABLED=0")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go list: %v\n%s", err, out)
		}
		deps := strings.Fields(string(out))
		if len(deps) < 20 {
			t.Fatalf("%d packages: is this the dependency list? %v", len(deps), deps)
		}
		for _, p := range deps {
			bad := slices.Contains(exact, p)
			for _, f := range forbidden {
				bad = bad || p == f || strings.HasPrefix(p, f+"/")
			}
			if bad {
				t.Errorf("%s/%s: coily-exec links %s", target.goos, target.goarch, p)
			}
		}
	}
}
