package server

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"coily.dev/coily/access"
	"coily.dev/coily/httpserve"
	"coily.dev/coily/refusal"
)

// The operations endpoints (docs/operations.md, "Metrics and health").
const (
	PathMetrics = "/metrics"
	PathHealthz = "/healthz"
	PathReadyz  = "/readyz"
)

// DefaultMetricsPort is the tailnet node's port for the operations
// endpoints (Prometheus exporters' customary 9464).
const DefaultMetricsPort = 9464

// OpsHandler serves /metrics (the Prometheus text format, from
// Config.Metrics), /healthz (200 while the process serves HTTP at all)
// and /readyz (200 when Ready finds nothing wrong, else 503 with one line
// per problem), GET and HEAD only.
//
// With identify set (the tailnet listener), each request's caller is
// identified as a gRPC call on the tailnet is (WhoIs on its address) and
// must hold the metrics permission; a refusal is audited and counted like
// any other, and answered 401 or 403 with its code, reading nothing more
// of the connection (httpserve.HangUp). Without it, no
// identity is asked: it is for a listener the operator bound to a local
// address for a local Prometheus.
func (s *Server) OpsHandler(identify bool) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET "+PathMetrics, promhttp.HandlerFor(s.cfg.Metrics, promhttp.HandlerOpts{
		ErrorHandling: promhttp.ContinueOnError, MaxRequestsInFlight: 4, Timeout: 10 * time.Second}))
	mux.HandleFunc("GET "+PathHealthz, func(w http.ResponseWriter, _ *http.Request) {
		plain(w, http.StatusOK, "ok\n")
	})
	mux.HandleFunc("GET "+PathReadyz, s.serveReadyz)
	if !identify {
		return mux
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := s.admitOps(r); err != nil {
			re := refusal.As(err)
			status := http.StatusForbidden
			if re.Code == refusal.Unauthenticated {
				status = http.StatusUnauthorized
			}
			httpserve.HangUp(w)
			plain(w, status, fmt.Sprintf("%s: %s\n", re.Code, re.Msg))
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// opsMethodConn names, in the audit, the refusals of a connection past
// its peer's cap on the tailnet listener ("http:" and a path is a
// request's; a path begins with "/").
const opsMethodConn = "http:connection"

// OpsServer is the HTTP server of OpsHandler(identify) under lim (zero
// fields: httpserve.DefaultOpsLimits). With identify (the tailnet listener) each
// peer's connections are capped too; a refusal is audited as
// http:connection and counted like any other. The local listener has no
// cap: every caller there is one address.
func (s *Server) OpsServer(identify bool, lim httpserve.Limits) *httpserve.Server {
	var capped *httpserve.Cap
	if identify {
		capped = s.connCap(access.TransportTailnet, opsMethodConn)
	}
	return httpserve.New(s.OpsHandler(identify), lim.Or(httpserve.DefaultOpsLimits), capped)
}

// admitOps identifies a tailnet request's caller and checks the metrics
// permission (access.OpsEndpoints); a refusal is audited (as a call to
// "http:" and the path).
func (s *Server) admitOps(r *http.Request) error {
	_, err := s.gate.Admit(r.Context(), access.Ops(r.RemoteAddr, "http:"+opsPath(r.URL.Path)))
	return err
}

// opsPath names a request's path in the audit: one of the endpoints, or
// "other" (a path is the caller's text: it is not copied into the record).
func opsPath(p string) string {
	switch p {
	case PathMetrics, PathHealthz, PathReadyz:
		return p
	}
	return "other"
}

func (s *Server) serveReadyz(w http.ResponseWriter, r *http.Request) {
	problems := s.Ready(r.Context())
	if len(problems) > 0 {
		plain(w, http.StatusServiceUnavailable, "not ready\n"+strings.Join(problems, "\n")+"\n")
		return
	}
	msg := "ready\n"
	if s.stopActive(true) {
		msg = "ready (locked out: commands are refused until an operator unlocks; a state, not unreadiness)\n"
	}
	plain(w, http.StatusOK, msg)
}

func plain(w http.ResponseWriter, status int, body string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(body))
}
