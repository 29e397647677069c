package server_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"tailscale.com/tsnet"

	"coily.dev/coily/access"
	"coily.dev/coily/audit"
	"coily.dev/coily/httpserve"
	"coily.dev/coily/internal/testserver"
	"coily.dev/coily/ops"
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
	c := in.TailnetNode(t, hostname, tags...).HTTPClient()
	t.Cleanup(c.CloseIdleConnections)
	return c
}

// serveOps serves the identifying handler on the server's tailnet node,
// as coily serve does on --tailnet (under lim), until the test ends.
func serveOps(t *testing.T, node *tsnet.Server, s *server.Server, lim httpserve.Limits) string {
	t.Helper()
	l, err := node.Listen("tcp", ":"+strconv.Itoa(ops.DefaultMetricsPort))
	if err != nil {
		t.Fatal(err)
	}
	hs := s.OpsServer(true, lim)
	done := make(chan error, 1)
	go func() { done <- hs.Serve(l) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := hs.Shutdown(ctx); err != nil { // waits for the connections being closed
			t.Errorf("ops server shutdown: %v", err)
		}
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("ops server: %v", err)
		}
	})
	return "http://" + net.JoinHostPort("coily", strconv.Itoa(ops.DefaultMetricsPort))
}

// On the tailnet the endpoints need the metrics permission: tag:prom
// (granted it) reads them; tag:agent (allowed to exec, not to read
// metrics) is refused 403 with the refusal code, and the refusal is
// audited and counted.
func TestTailnetMetricsPermission(t *testing.T) {
	in := testserver.Start(t, testserver.Options{Policy: metricsPolicy, Tailnet: true})
	base := serveOps(t, in.Node, in.Server, httpserve.Limits{})
	prom := tailnetHTTP(t, in, "prom", "tag:prom")
	agent := tailnetHTTP(t, in, "agent", "tag:agent")

	for _, p := range []string{ops.PathMetrics, ops.PathHealthz, ops.PathReadyz} {
		if code, body := get(t, prom, "GET", base+p); code != 200 {
			t.Errorf("tag:prom GET %s: %d %q", p, code, body)
		}
		code, body := get(t, agent, "GET", base+p)
		if code != http.StatusForbidden || !strings.HasPrefix(body, "permission-denied: tag:agent may not read the metrics") {
			t.Errorf("tag:agent GET %s: %d %q, want 403 permission-denied", p, code, body)
		}
	}
	rec := in.WaitAudit(t, func(r audit.Record) bool {
		return r.Method == "http:"+ops.PathMetrics && r.Principal == "tag:agent"
	})
	if rec.Decision != "refuse" || rec.Code != "permission-denied" || rec.Transport != access.TransportTailnet {
		t.Errorf("audit record of the refusal: %+v", rec)
	}
	if code, _ := get(t, agent, "GET", base+"/<script>"); code != http.StatusForbidden {
		t.Errorf("tag:agent GET of another path: %d", code)
	}
	in.WaitAudit(t, func(r audit.Record) bool { return r.Method == "http:other" && r.Principal == "tag:agent" })
	_, body := get(t, prom, "GET", base+ops.PathMetrics)
	if n, ok := sample(body, `coily_refusals_total{code="permission-denied"}`); !ok || n < 4 {
		t.Errorf("permission-denied refusals counted: %v (%v), want at least 4", n, ok)
	}
	if strings.Contains(body, "tag:agent") || strings.Contains(body, "<script>") {
		t.Error("a principal or a requested path became a label")
	}
}

// On the tailnet a peer holds at most its cap of connections: one with
// no permission holds its cap with headers it never finishes, and each
// connection past it is closed at once; those are closed when the header
// timeout passes. A Prometheus is served meanwhile and sees the refusals
// counted; the first is audited. A refused request's body is not read,
// nor its connection kept.
func TestTailnetOpsSlowPeers(t *testing.T) {
	in := testserver.Start(t, testserver.Options{Policy: metricsPolicy, Tailnet: true})
	lim := httpserve.Limits{ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 5 * time.Second, PeerConns: 2}
	base := serveOps(t, in.Node, in.Server, lim)
	prom := tailnetHTTP(t, in, "prom", "tag:prom")
	agent := in.TailnetNode(t, "agent", "tag:agent")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	addr := net.JoinHostPort("coily", strconv.Itoa(ops.DefaultMetricsPort))
	held := testserver.HoldMany(t, lim.PeerConns+2, func() (net.Conn, error) { return agent.Dial(ctx, "tcp", addr) },
		addr, 100*time.Millisecond)
	for i := range 2 {
		select {
		case h := <-held:
			if d := h.Closed.Sub(h.Opened); d > lim.ReadHeaderTimeout/2 {
				t.Fatalf("connection %d past the cap closed after %s, not at once", i, d)
			}
		case <-time.After(lim.ReadHeaderTimeout / 2):
			t.Fatalf("only %d connections past the cap were closed at once, want 2", i)
		}
	}
	rec := in.WaitAudit(t, func(r audit.Record) bool { return r.Method == "http:connection" })
	if rec.Principal != "tag:agent" || rec.Code != "rate-limit" || rec.Transport != access.TransportTailnet {
		t.Errorf("connection refusal recorded as %+v", rec)
	}
	code, body := get(t, prom, "GET", base+ops.PathMetrics)
	if n, ok := sample(body, `coily_refusals_total{code="rate-limit"}`); code != 200 || !ok || n != 2 {
		t.Errorf("scrape while a peer holds its cap: %d, rate-limit refusals %v (%v), want 2", code, n, ok)
	}
	for i := range lim.PeerConns {
		select {
		case h := <-held:
			if d := h.Closed.Sub(h.Opened); d < lim.ReadHeaderTimeout*3/4 {
				t.Errorf("connection %d within the cap closed after %s, before the header timeout", i, d)
			}
		case <-time.After(lim.ReadHeaderTimeout + 10*time.Second):
			t.Fatalf("connection %d within the cap outlived the header timeout", i)
		}
	}
	for _, size := range []string{"100000000", "100"} {
		c, err := agent.Dial(ctx, "tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		p := testserver.SendPartial(t, c, "GET /metrics HTTP/1.1\r\nHost: "+addr+"\r\nContent-Length: "+size+"\r\n\r\nxx")
		if p.Status != http.StatusForbidden || p.Closed > lim.ReadTimeout/2 {
			t.Errorf("a refused request with a body of %s bytes, 2 sent: %d, closed after %s; want 403 at once", size, p.Status, p.Closed)
		}
	}
}
