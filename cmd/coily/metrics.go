package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"tailscale.com/tsnet"

	"coily.dev/coily/httpserve"
	"coily.dev/coily/server"
)

// metricsRegistry is the registry `coily serve` serves: the server's own
// metrics, and the Go runtime's and the process's.
func metricsRegistry() (*prometheus.Registry, error) {
	reg := prometheus.NewRegistry()
	err := errors.Join(reg.Register(collectors.NewGoCollector()),
		reg.Register(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})))
	return reg, err
}

// opsServers are the HTTP servers of the operations endpoints.
type opsServers struct {
	servers []*httpserve.Server
	done    chan error
}

// startOps serves the operations endpoints (/metrics, /healthz, /readyz):
// on o.metricsListen with no identity asked, and on the tailnet node's
// o.metricsTailnetPort to callers with the metrics permission.
func startOps(log *slog.Logger, srv *server.Server, o serveOptions, node *tsnet.Server) (*opsServers, error) {
	ops := &opsServers{done: make(chan error, 2)}
	if o.metricsListen != "" {
		l, err := net.Listen("tcp", o.metricsListen)
		if err != nil {
			return nil, fmt.Errorf("metrics listener: %w", err)
		}
		warnIfNotLoopback(log, l.Addr())
		ops.serve(l, srv.OpsServer(false, httpserve.Limits{}))
		log.Info("serving metrics", "addr", l.Addr().String(), "identity", "none (local address)")
	}
	if node != nil && o.metricsTailnetPort > 0 {
		l, err := node.Listen("tcp", ":"+strconv.Itoa(o.metricsTailnetPort))
		if err != nil {
			ops.close()
			return nil, fmt.Errorf("tailnet metrics listener: %w", err)
		}
		ops.serve(l, srv.OpsServer(true, httpserve.Limits{}))
		log.Info("serving metrics", "addr", net.JoinHostPort(node.Hostname, strconv.Itoa(o.metricsTailnetPort)),
			"identity", "tailnet, metrics permission")
	}
	return ops, nil
}

// serve runs hs on l (its timeouts and, on the tailnet, its cap per peer
// are httpserve.DefaultOpsLimits).
func (ops *opsServers) serve(l net.Listener, hs *httpserve.Server) {
	ops.servers = append(ops.servers, hs)
	go func() { ops.done <- hs.Serve(l) }()
}

// close stops the servers, letting requests in flight finish for a
// moment, and waits for them.
func (ops *opsServers) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, hs := range ops.servers {
		if hs.Shutdown(ctx) != nil {
			hs.Close()
		}
	}
	for range ops.servers {
		<-ops.done
	}
	ops.servers = nil
}

// warnIfNotLoopback says so when the unauthenticated listener is reachable
// from other hosts.
func warnIfNotLoopback(log *slog.Logger, a net.Addr) {
	if ta, ok := a.(*net.TCPAddr); ok && !ta.IP.IsLoopback() {
		log.Warn("the metrics listener asks no identity and is reachable beyond this host; bind it to loopback (127.0.0.1:9464) unless that is meant",
			"addr", a.String())
	}
}
