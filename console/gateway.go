package console

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync"
	"time"

	"coily.dev/coily/httpserve"
)

// Gateway brings a console that serves on a tailnet node to a browser on
// this machine, for `coily dev`: it listens on loopback and forwards each
// request over the tailnet from a node of its own (Dial), so the console
// identifies every request as that node, by WhoIs, like any caller. It
// adds no identity of its own: whoever reaches its loopback address acts
// as its node (coily dev's owner), which is why it is for coily dev only.
//
// It answers only requests that name its own loopback address (a page of
// another site whose name was pointed at 127.0.0.1 is refused: DNS
// rebinding), and tells the console the browser's origin as the
// console's own when it is the gateway's; a request from any other origin
// keeps its origin, and the console refuses it.
type Gateway struct {
	// Dial connects over the tailnet (the gateway node's tsnet Dial).
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// Target is the console's address on the tailnet, e.g. "coily:80".
	Target string
	// Host is the host name the console answers to, e.g. "coily".
	Host   string
	Logger *slog.Logger

	mu     sync.Mutex
	srv    *http.Server
	closed bool
}

// Serve serves the gateway on l (a loopback listener) until Close.
func (g *Gateway) Serve(l net.Listener) error {
	if g.Logger == nil {
		g.Logger = slog.Default()
	}
	lim := httpserve.DefaultWebLimits
	self := l.Addr().String()
	_, port, _ := net.SplitHostPort(self)
	hosts := map[string]bool{self: true, "localhost:" + port: true}
	proxy := g.proxy(lim.PeerConns * 3 / 4)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The console's limits, but for WriteTimeout: an event stream is an
	// answer that lasts (the console bounds each of its events).
	srv := &http.Server{ReadHeaderTimeout: lim.ReadHeaderTimeout, ReadTimeout: lim.ReadTimeout, IdleTimeout: lim.IdleTimeout,
		MaxHeaderBytes: lim.MaxHeaderBytes, BaseContext: func(net.Listener) context.Context { return ctx },
		ErrorLog: slog.NewLogLogger(g.Logger.Handler(), slog.LevelDebug),
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !hosts[r.Host] {
				securityHeaders(w.Header())
				http.Error(w, "coily dev: this gateway answers only to "+self, http.StatusMisdirectedRequest)
				return
			}
			proxy.ServeHTTP(w, r)
		})}
	srv.RegisterOnShutdown(cancel)
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		l.Close()
		return nil
	}
	g.srv = srv
	g.mu.Unlock()
	if err := srv.Serve(l); !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("console gateway: %w", err)
	}
	return nil
}

// proxy forwards requests to the console over at most conns connections:
// every request reaches the console from the gateway's one node, so it
// keeps under the console's cap per peer, and a busy browser waits for a
// connection rather than being refused.
func (g *Gateway) proxy(conns int) *httputil.ReverseProxy {
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(&url.URL{Scheme: "http", Host: g.Target})
			pr.Out.Host = g.Host
			if o := pr.In.Header.Get("Origin"); o == "http://"+pr.In.Host {
				pr.Out.Header.Set("Origin", "http://"+g.Host)
			}
		},
		Transport: &http.Transport{DialContext: g.Dial, MaxIdleConns: 8, MaxConnsPerHost: conns,
			IdleConnTimeout: time.Minute, ResponseHeaderTimeout: 30 * time.Second},
		FlushInterval: -1, // event streams as they come
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			g.Logger.Warn("console gateway: the console did not answer", "err", err)
			http.Error(w, "coily dev: the console did not answer", http.StatusBadGateway)
		},
	}
}

// Close stops the gateway, its streams included.
func (g *Gateway) Close() error {
	g.mu.Lock()
	g.closed = true
	srv := g.srv
	g.mu.Unlock()
	if srv == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		return errors.Join(err, srv.Close())
	}
	return nil
}
