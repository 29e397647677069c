package server

import (
	"context"
	"net/http"

	"coily.dev/coily/access"
	"coily.dev/coily/httpserve"
	"coily.dev/coily/ops"
)

// OpsHandler serves the operations endpoints from the server's registry
// and readiness (ops.Handler). With identify set (the tailnet listener),
// each request is admitted by the server's gate first.
func (s *Server) OpsHandler(identify bool) http.Handler {
	cfg := ops.Config{Metrics: s.cfg.Metrics, State: opsState{s}}
	if identify {
		cfg.Gate = s.gate
	}
	return ops.Handler(cfg)
}

// OpsServer is the HTTP server of OpsHandler(identify) under lim (zero
// fields: httpserve.DefaultOpsLimits). With identify (the tailnet listener) each
// peer's connections are capped too; a refusal is audited as
// http:connection and counted like any other. The local listener has no
// cap: every caller there is one address.
func (s *Server) OpsServer(identify bool, lim httpserve.Limits) *httpserve.Server {
	var capped *httpserve.Cap
	if identify {
		capped = s.connCap(access.TransportTailnet, ops.MethodConn)
	}
	return httpserve.New(s.OpsHandler(identify), lim.Or(httpserve.DefaultOpsLimits), capped)
}

// Ready reports what keeps the server from serving Execs, one line per
// component ("audit: …"); none means ready (ops.Readiness).
func (s *Server) Ready(ctx context.Context) []string { return s.ready.Ready(ctx) }

// opsState is the server's state as the operations endpoints ask it.
type opsState struct{ *Server }

func (o opsState) LockedOut() bool { return o.stopActive(true) }
