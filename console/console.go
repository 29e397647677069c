// Package console owns coily's web console: the pages the owner opens on
// the tailnet (status, approvals, the live audit log), their JSON API and
// the loopback gateway `coily dev` serves them through.
//
// Invariants:
//   - identity comes only from the tailnet: every request is identified
//     and authorized by the server's Web methods (WhoIs on the remote
//     address, the per-RPC authorization table), never by a header,
//     cookie, token or password; the console sets no cookie at all;
//   - every action is the server's own (package server audits it as its
//     gRPC twin); the console renders and routes, it decides nothing;
//   - nothing of a request's body is read before its caller is admitted
//     for its route's action (admit.go); a refused request's connection
//     is closed unread, and every connection is bounded in time, in
//     header size and in number per tailnet address (httpserve.Limits);
//   - a state-changing request must be same-origin (Go's
//     http.CrossOriginProtection) and name one of the console's own host
//     names (no DNS rebinding); refusals of either are audited;
//   - untrusted text (argv, reasons, notes, principals, peers, host names)
//     leaves the server already made visible (package visible: control,
//     bidi and other invisible characters escaped) and the pages insert it
//     as text only (textContent), under a Content-Security-Policy that
//     allows only the console's own script and style files and requires
//     Trusted Types, so no markup of anyone's can run;
//   - no page may be framed (frame-ancestors 'none', X-Frame-Options) and
//     no URL leaks in a Referer;
//   - the files are embedded: nothing is fetched from anywhere at run time.
package console

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"coily.dev/coily/httpserve"
	"coily.dev/coily/webapi"
)

// Config configures a console.
type Config struct {
	// Server answers every request (required).
	Server webapi.Server
	// Hosts are the host names the console answers to (the node's short
	// name, its MagicDNS name, its tailnet addresses); a request naming
	// another host is refused (DNS rebinding). Required.
	Hosts  []string
	Logger *slog.Logger
	// Dev marks every page as coily dev's (a banner: not for production).
	Dev bool
	// Heartbeat is the interval of a stream's keep-alive and of its
	// re-authorization (a revoked grant ends it); 0 means 15 s.
	Heartbeat time.Duration
	// Limits bound the console's connections (zero fields:
	// httpserve.DefaultWebLimits): its timeouts and each peer's cap.
	Limits httpserve.Limits
	Now    func() time.Time
}

// Console is the web console. Its streams end when the server shuts down
// or the console is closed.
type Console struct {
	cfg     Config
	log     *slog.Logger
	handler http.Handler
	hosts   map[string]bool
	limits  httpserve.Limits

	ctx    context.Context // ended by Close: ends every stream
	cancel context.CancelFunc
	mu     sync.Mutex
	srvs   []*httpserve.Server
	wg     sync.WaitGroup
}

// New returns a console serving cfg.Server.
func New(cfg Config) (*Console, error) {
	if cfg.Server == nil {
		return nil, errors.New("console: a server is required")
	}
	if len(cfg.Hosts) == 0 {
		return nil, errors.New("console: the host names it answers to are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Heartbeat <= 0 {
		cfg.Heartbeat = 15 * time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	c := &Console{cfg: cfg, log: cfg.Logger, hosts: map[string]bool{}, limits: cfg.Limits.Or(httpserve.DefaultWebLimits)}
	for _, h := range cfg.Hosts {
		c.hosts[normalHost(h)] = true
	}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	c.handler = c.guard(c.routes())
	return c, nil
}

// ServeHTTP serves the console.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) { c.handler.ServeHTTP(w, r) }

// Serve serves the console on l (a tailnet listener) until Close; it
// returns nil once closed. Its connections are bounded by Config.Limits:
// each peer's are capped, and their refusals audited.
func (c *Console) Serve(l net.Listener) error {
	return c.serve(c, l)
}

// serve runs h on l under the console's limits, tracked so that Close
// stops it.
func (c *Console) serve(h http.Handler, l net.Listener) error {
	srv := c.cfg.Server.WebHTTPServer(h, c.limits)
	srv.BaseContext = func(net.Listener) context.Context { return c.ctx }
	srv.ErrorLog = slog.NewLogLogger(c.log.Handler(), slog.LevelDebug)
	c.mu.Lock()
	if c.ctx.Err() != nil {
		c.mu.Unlock()
		l.Close()
		return nil
	}
	c.srvs = append(c.srvs, srv)
	c.wg.Add(1)
	c.mu.Unlock()
	defer c.wg.Done()
	err := srv.Serve(l)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return fmt.Errorf("console: %w", err)
}

// Close ends every stream and stops every Serve, waiting at most for the
// requests in progress to finish (bounded).
func (c *Console) Close() error {
	c.mu.Lock()
	c.cancel()
	srvs := c.srvs
	c.srvs = nil
	c.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var errs []error
	for _, s := range srvs {
		if err := s.Shutdown(ctx); err != nil {
			errs = append(errs, err, s.Close())
		}
	}
	c.wg.Wait()
	return errors.Join(errs...)
}

// normalHost is a Host header's name, lower case, without its port, its
// brackets or a trailing dot.
func normalHost(h string) string {
	if host, _, err := net.SplitHostPort(h); err == nil {
		h = host
	}
	h = strings.TrimSuffix(strings.TrimPrefix(strings.TrimSuffix(h, "]"), "["), ".")
	return strings.ToLower(h)
}
