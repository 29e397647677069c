package server_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"tailscale.com/tsnet"

	"coily.dev/coily/audit"
	"coily.dev/coily/internal/devnet"
	"coily.dev/coily/internal/testserver"
	"coily.dev/coily/server"
)

// metricsPolicy grants the metrics permission to tag:prom alone.
const metricsPolicy = `version: 1
roles:
  monitoring: {permissions: [metrics]}
  agent: {permissions: [exec], commands: [echo]}
grants:
  - {principals: ["tag:prom"], roles: [monitoring]}
  - {principals: ["tag:agent"], roles: [agent]}
commands:
  - {name: echo, binary: /bin/echo, args: ["**"], sandbox: native}
`

// tailnetHTTP joins the server's tailnet as a node with tags and returns
// an HTTP client dialling through it.
func tailnetHTTP(t *testing.T, in *testserver.Instance, hostname string, tags ...string) *http.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	dir, err := os.MkdirTemp("", "coily-tsnet-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	node, err := devnet.Join(ctx, in.Net.ControlURL, devnet.NodeOptions{Dir: dir, Hostname: hostname, Tags: tags, Ephemeral: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { node.Close() })
	if err := devnet.WaitReachable(ctx, node, "coily"); err != nil {
		t.Fatal(err)
	}
	c := node.HTTPClient()
	t.Cleanup(c.CloseIdleConnections)
	return c
}

// serveOps serves the identifying handler on the server's tailnet node,
// as coily serve does on --tailnet, until the test ends.
func serveOps(t *testing.T, node *tsnet.Server, s *server.Server) string {
	t.Helper()
	l, err := node.Listen("tcp", ":"+strconv.Itoa(server.DefaultMetricsPort))
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: s.OpsHandler(true), ReadHeaderTimeout: 5 * time.Second}
	done := make(chan error, 1)
	go func() { done <- hs.Serve(l) }()
	t.Cleanup(func() {
		hs.Close()
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("ops server: %v", err)
		}
	})
	return "http://" + net.JoinHostPort("coily", strconv.Itoa(server.DefaultMetricsPort))
}

// On the tailnet the endpoints need the metrics permission: tag:prom
// (granted it) reads them; tag:agent (allowed to exec, not to read
// metrics) is refused 403 with the refusal code, and the refusal is
// audited and counted.
func TestTailnetMetricsPermission(t *testing.T) {
	in := testserver.Start(t, testserver.Options{Policy: metricsPolicy, Tailnet: true})
	base := serveOps(t, in.Node, in.Server)
	prom := tailnetHTTP(t, in, "prom", "tag:prom")
	agent := tailnetHTTP(t, in, "agent", "tag:agent")

	for _, p := range []string{server.PathMetrics, server.PathHealthz, server.PathReadyz} {
		if code, body := get(t, prom, "GET", base+p); code != 200 {
			t.Errorf("tag:prom GET %s: %d %q", p, code, body)
		}
		code, body := get(t, agent, "GET", base+p)
		if code != http.StatusForbidden || !strings.HasPrefix(body, "permission-denied: tag:agent may not read the metrics") {
			t.Errorf("tag:agent GET %s: %d %q, want 403 permission-denied", p, code, body)
		}
	}
	rec := in.WaitAudit(t, func(r audit.Record) bool {
		return r.Method == "http:"+server.PathMetrics && r.Principal == "tag:agent"
	})
	if rec.Decision != "refuse" || rec.Code != "permission-denied" || rec.Transport != server.TransportTailnet {
		t.Errorf("audit record of the refusal: %+v", rec)
	}
	if code, _ := get(t, agent, "GET", base+"/<script>"); code != http.StatusForbidden {
		t.Errorf("tag:agent GET of another path: %d", code)
	}
	in.WaitAudit(t, func(r audit.Record) bool { return r.Method == "http:other" && r.Principal == "tag:agent" })
	_, body := get(t, prom, "GET", base+server.PathMetrics)
	if n, ok := sample(body, `coily_refusals_total{code="permission-denied"}`); !ok || n < 4 {
		t.Errorf("permission-denied refusals counted: %v (%v), want at least 4", n, ok)
	}
	if strings.Contains(body, "tag:agent") || strings.Contains(body, "<script>") {
		t.Error("a principal or a requested path became a label")
	}
}
