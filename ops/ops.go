// Package ops serves the operations endpoints (docs/operations.md,
// "Metrics and health"): /metrics from the server's registry, /healthz,
// and /readyz from the server's readiness (ready.go), each request on the
// tailnet listener admitted by access first.
package ops

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
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

// MethodConn names, in the audit, the refusals of a connection past
// its peer's cap on the tailnet listener ("http:" and a path is a
// request's; a path begins with "/").
const MethodConn = "http:connection"

// Gate admits a request (access.Gate).
type Gate interface {
	Admit(ctx context.Context, a access.Action) (context.Context, error)
}

// State is what the endpoints ask of the server.
type State interface {
	// Ready reports what keeps the server from serving Execs, one line
	// per problem; none means ready (Readiness.Ready).
	Ready(ctx context.Context) []string
	// LockedOut reports a lockout in force.
	LockedOut() bool
}

// Config is what the endpoints serve from.
type Config struct {
	// Metrics is the registry /metrics serves.
	Metrics prometheus.Gatherer
	State   State
	// Gate, when set (the tailnet listener), admits each request; nil
	// asks no identity (a listener the operator bound to a local address).
	Gate Gate
}

// Handler serves /metrics (the Prometheus text format, from
// cfg.Metrics), /healthz (200 while the process serves HTTP at all)
// and /readyz (200 when Ready finds nothing wrong, else 503 with one line
// per problem), GET and HEAD only.
//
// With a gate (the tailnet listener), each request's caller is
// identified as a gRPC call on the tailnet is (WhoIs on its address) and
// must hold the metrics permission; a refusal is audited and counted like
// any other, and answered 401 or 403 with its code, reading nothing more
// of the connection (httpserve.HangUp). Without one, no
// identity is asked: it is for a listener the operator bound to a local
// address for a local Prometheus.
func Handler(cfg Config) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET "+PathMetrics, promhttp.HandlerFor(cfg.Metrics, promhttp.HandlerOpts{
		ErrorHandling: promhttp.ContinueOnError, MaxRequestsInFlight: 4, Timeout: 10 * time.Second}))
	mux.HandleFunc("GET "+PathHealthz, func(w http.ResponseWriter, _ *http.Request) {
		plain(w, http.StatusOK, "ok\n")
	})
	mux.HandleFunc("GET "+PathReadyz, func(w http.ResponseWriter, r *http.Request) { serveReadyz(w, r, cfg.State) })
	if cfg.Gate == nil {
		return mux
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := admit(cfg.Gate, r); err != nil {
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

// admit identifies a tailnet request's caller and checks the metrics
// permission (access.OpsEndpoints); a refusal is audited (as a call to
// "http:" and the path).
func admit(g Gate, r *http.Request) error {
	_, err := g.Admit(r.Context(), access.Ops(r.RemoteAddr, "http:"+opsPath(r.URL.Path)))
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

func serveReadyz(w http.ResponseWriter, r *http.Request, st State) {
	problems := st.Ready(r.Context())
	if len(problems) > 0 {
		plain(w, http.StatusServiceUnavailable, "not ready\n"+strings.Join(problems, "\n")+"\n")
		return
	}
	msg := "ready\n"
	if st.LockedOut() {
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
