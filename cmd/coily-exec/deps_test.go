package main

import (
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// coily-exec links the one call and nothing heavy: no gRPC, protobuf
// runtime, net/http, network poller, command-line library or the general
// client, on every system it ships for. That is its whole point
// (docs/benchmarks.md): TestCoilyExecSameAsCoilyExec checks it still does
// the job.
func TestCoilyExecLinksNextToNothing(t *testing.T) {
	forbidden := []string{"google.golang.org/grpc", "google.golang.org/protobuf/proto", "google.golang.org/protobuf/reflect",
		"google.golang.org/protobuf/internal/impl", "net/http", "github.com/spf13/cobra", "coily.dev/coily/client/grpclite",
		"coily.dev/coily/client/tsnode", "coily.dev/coily/cli", "coily.dev/coily/proto", "coily.dev/coily/refusal", "tailscale.com", "regexp", "testing"}
	// Themselves, not their subpackages (net/netip and net/url start no
	// poller; the client's subpackages are coily-exec's own).
	exact := []string{"net", "coily.dev/coily/client"}
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
