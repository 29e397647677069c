package main

import (
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// deps lists the packages a build of pkg links (with tags) for the host.
func deps(t *testing.T, pkg string, tags ...string) []string {
	t.Helper()
	return depsFor(t, "", "", pkg, tags...)
}

// depsFor lists the packages a build of pkg links (with tags) for goos
// and goarch ("": the host's), without cgo as the release builds them.
func depsFor(t *testing.T, goos, goarch, pkg string, tags ...string) []string {
	t.Helper()
	args := []string{"list", "-deps"}
	if len(tags) > 0 {
		args = append(args, "-tags", strings.Join(tags, ","))
	}
	cmd := exec.Command("go", append(args, pkg)...)
	cmd.Env = os.Environ()
	if goos != "" {
		cmd.Env = append(cmd.Env, "GOOS="+goos, "GOARCH="+goarch, "CGO_ENABLED=0")
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("GOOS=%s GOARCH=%s go list -deps %s: %v\n%s", goos, goarch, pkg, err, out)
	}
	return strings.Fields(string(out))
}

// The lean client links the API, the client transports and the command
// line only: no server, keystore, Vault, sandbox, policy engine, embedded
// tailnet node, grpc-go client or test component (nor the testing
// package), on every
// system it ships for (scripts/release.sh: linux, darwin, android).
// That is what keeps it starting in milliseconds (docs/benchmarks.md).
func TestLeanClientLinksNoServer(t *testing.T) {
	forbidden := []string{
		"coily.dev/coily/server", "coily.dev/coily/keystore", "coily.dev/coily/sandbox", "coily.dev/coily/policy",
		"coily.dev/coily/store", "coily.dev/coily/audit", "coily.dev/coily/egress", "coily.dev/coily/bridge",
		"coily.dev/coily/internal/", "coily.dev/coily/client/tsnode", "github.com/hashicorp/vault",
		"github.com/zalando/go-keyring", "go.etcd.io/bbolt", "tailscale.com/tsnet", "tailscale.com/wgengine/magicsock",
		"tailscale.com/tstest", "tailscale.com/derp/derpserver", "github.com/prometheus/client_golang",
		"testing",
		// grpc-go's client and transport: calls go over connect-go.
		"google.golang.org/grpc/internal/transport", "google.golang.org/grpc/balancer",
		"google.golang.org/grpc/resolver",
	}
	// Forbidden themselves, not their subpackages: grpc-go's status and
	// codes (which link no transport) read the server's refusals; HTTP/2
	// is Go's own in net/http.
	forbiddenExact := []string{"google.golang.org/grpc", "golang.org/x/net/http2"}
	for _, target := range []struct{ goos, goarch string }{{"linux", "amd64"}, {"linux", "arm64"}, {"darwin", "arm64"}, {"android", "arm64"}} {
		t.Run(target.goos+"/"+target.goarch, func(t *testing.T) {
			all := depsFor(t, target.goos, target.goarch, "coily.dev/coily/cmd/coily-client")
			if !slices.Contains(all, "coily.dev/coily/cli") {
				t.Fatalf("coily-client does not link coily.dev/coily/cli: is this list its dependencies? %v", all)
			}
			for _, p := range all {
				if slices.Contains(forbiddenExact, p) {
					t.Errorf("coily-client links %s", p)
				}
				for _, f := range forbidden {
					if p == f || strings.HasPrefix(p, f+"/") || strings.HasSuffix(f, "/") && strings.HasPrefix(p, f) {
						t.Errorf("coily-client links %s", p)
					}
				}
			}
		})
	}
}

// No production build links a test component: coily dev's private
// tailnet (internal/devnet, Tailscale's test control server) is in the
// development build only (-tags coilydev).
func TestProductionLinksNoTestComponent(t *testing.T) {
	for _, p := range deps(t, "coily.dev/coily/cmd/coily") {
		if strings.HasPrefix(p, "coily.dev/coily/internal/") || strings.HasPrefix(p, "tailscale.com/tstest") {
			t.Errorf("the production coily links %s", p)
		}
	}
	found := false
	for _, p := range deps(t, "coily.dev/coily/cmd/coily", "coilydev") {
		found = found || p == "coily.dev/coily/internal/devnet"
	}
	if !found {
		t.Error("the development build does not link internal/devnet: is coily dev still there?")
	}
}
