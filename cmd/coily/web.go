package main

import (
	"context"
	"errors"
	"log/slog"

	"tailscale.com/tsnet"

	"coily.dev/coily/console"
	"coily.dev/coily/server"
)

// webConsole is the web console `coily serve --web` runs on the tailnet
// node (package console).
type webConsole struct {
	c    *console.Console
	ln   *console.NodeListener
	done chan error
}

// startWeb serves the console on the node: HTTPS on :443 when the tailnet
// offers certificates, else HTTP on :80 (console.ListenNode). It returns
// nil when the console is not wanted.
func startWeb(ctx context.Context, log *slog.Logger, srv *server.Server, o serveOptions, node *tsnet.Server) (*webConsole, error) {
	if !o.web {
		return nil, nil
	}
	if node == nil {
		return nil, errors.New("--web needs --tailnet: the console's callers are identified by the tailnet")
	}
	ln, err := console.ListenNode(ctx, node, log, o.webHTTP)
	if err != nil {
		return nil, err
	}
	c, err := console.New(console.Config{Server: srv, Hosts: ln.Hosts, Logger: log, Dev: o.webDev})
	if err != nil {
		ln.Close()
		return nil, err
	}
	w := &webConsole{c: c, ln: ln, done: make(chan error, 2)}
	go func() { w.done <- c.Serve(ln.Listener) }()
	if ln.Redirect != nil {
		go func() { w.done <- c.ServeRedirect(ln.Redirect, ln.URL) }()
	} else {
		w.done <- nil
	}
	log.Info("serving the web console", "url", ln.URL, "tls", ln.TLS, "hosts", ln.Hosts)
	return w, nil
}

// url is the console's address on the tailnet ("" when not serving).
func (w *webConsole) url() string {
	if w == nil {
		return ""
	}
	return w.ln.URL
}

// close stops the console and its streams.
func (w *webConsole) close() {
	if w == nil {
		return
	}
	w.c.Close()
	<-w.done
	<-w.done
}
