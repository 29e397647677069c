package main

import (
	"context"
	"errors"
	"log/slog"
	"strings"

	"tailscale.com/tsnet"

	"coily.dev/coily/console"
	"coily.dev/coily/server"
	"coily.dev/coily/webapi"
)

// webConsole is the web console `coily serve --web` runs on the tailnet
// node (package console).
type webConsole struct {
	c    *console.Console
	ln   *console.NodeListener
	done chan error
}

// webListener is the console's listener, nil when the console is not
// wanted.
type webListener struct{ *console.NodeListener }

// listenWeb opens the console's listener on the node: HTTPS on :443 when
// the tailnet offers certificates, else HTTP on :80 (console.ListenNode).
func listenWeb(ctx context.Context, log *slog.Logger, o serveOptions, node *tsnet.Server) (webListener, error) {
	if !o.web {
		return webListener{}, nil
	}
	if node == nil {
		return webListener{}, errors.New("--web needs --tailnet: the console's callers are identified by the tailnet")
	}
	ln, err := console.ListenNode(ctx, node, log, o.webHTTP)
	return webListener{ln}, err
}

// url is the console's base URL without its trailing slash ("" when
// none), as notifications link to it.
func (l webListener) url() string {
	if l.NodeListener == nil {
		return ""
	}
	return strings.TrimSuffix(l.URL, "/")
}

// Close closes the listener, if any.
func (l webListener) Close() {
	if l.NodeListener != nil {
		l.NodeListener.Close()
	}
}

// webServer is the server as the console reaches it: its audit stream
// read from feed when there is one (every host's records).
func webServer(srv *server.Server, feed webapi.AuditFeed) webapi.Server {
	if feed == nil {
		return srv
	}
	return webapi.WithAuditFeed(srv, feed)
}

// startWeb serves the console on its listener; nil when not wanted.
func startWeb(log *slog.Logger, srv webapi.Server, o serveOptions, wl webListener) (*webConsole, error) {
	ln := wl.NodeListener
	if ln == nil {
		return nil, nil
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
