package main

import (
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// git-remote-coily links coily's client stack (for the settings every
// client resolves the server with) and net/http, and nothing heavy: no
// server, command-line library, embedded tailnet node, grpc-go transport
// or test component, on every system it ships for. git starts it for
// every fetch and push.
func TestRemoteHelperLinksNoServer(t *testing.T) {
	forbidden := []string{"coily.dev/coily/server", "coily.dev/coily/cli", "coily.dev/coily/keystore", "coily.dev/coily/sandbox",
		"coily.dev/coily/policy", "coily.dev/coily/store", "coily.dev/coily/audit", "coily.dev/coily/egress",
		"coily.dev/coily/internal/", "coily.dev/coily/client/tsnode", "github.com/spf13/cobra",
		"google.golang.org/grpc/internal/transport", "google.golang.org/grpc/balancer", "google.golang.org/grpc/resolver",
		"tailscale.com/", "go.etcd.io/bbolt", "testing"}
	for _, target := range []struct{ goos, goarch string }{{"linux", "amd64"}, {"linux", "arm64"}, {"darwin", "arm64"}} {
		cmd := exec.Command("go", "list", "-deps", ".")
		cmd.Env = append(os.Environ(), "GOOS="+target.goos, "GOARCH="+target.goarch, "CGO_ENABLED=0")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go list: %v\n%s", err, out)
		}
		all := strings.Fields(string(out))
		if !slices.Contains(all, "coily.dev/coily/client/gitremote") {
			t.Fatalf("%s/%s: git-remote-coily does not link client/gitremote: is this list its dependencies?", target.goos, target.goarch)
		}
		for _, p := range all {
			for _, f := range forbidden {
				if p == f || strings.HasPrefix(p, strings.TrimSuffix(f, "/")+"/") {
					t.Errorf("%s/%s: git-remote-coily links %s", target.goos, target.goarch, p)
				}
			}
		}
	}
}
